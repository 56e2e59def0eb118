package ewma

import (
	"sync"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	var e Duration
	if v := e.Value(); v != 0 {
		t.Fatalf("zero value: %v, want 0", v)
	}
	e.Observe(800 * time.Millisecond)
	if v := e.Value(); v != 800*time.Millisecond {
		t.Fatalf("first observation: %v, want 800ms", v)
	}
	e.Observe(0)
	if v, want := e.Value(), 800*time.Millisecond+(1-800*time.Millisecond)/8; v != want {
		t.Fatalf("after 0: %v, want %v (0 counts as 1ns, weight 1/8)", v, want)
	}
	var f Duration
	f.Observe(-time.Second)
	if v := f.Value(); v != 1 {
		t.Fatalf("negative first observation: %v, want 1ns", v)
	}
}

func TestDurationConcurrent(t *testing.T) {
	var e Duration
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				e.Observe(time.Millisecond)
			}
		})
	}
	wg.Wait()
	if v := e.Value(); v != time.Millisecond {
		t.Fatalf("average of equal observations: %v, want 1ms", v)
	}
}
