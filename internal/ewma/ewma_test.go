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

func TestSize(t *testing.T) {
	var s Size
	if v := s.Value(); v != 0 {
		t.Fatalf("zero value: %d, want 0", v)
	}
	s.Observe(800)
	if v := s.Value(); v != 800 {
		t.Fatalf("first observation: %d, want 800", v)
	}
	s.Observe(0)
	if v, want := s.Value(), 800+(1-800)/8; v != want {
		t.Fatalf("after 0: %d, want %d (0 counts as 1, weight 1/8)", v, want)
	}
	for range 100 {
		s.Observe(64)
	}
	if v := s.Value(); v < 64 || v > 72 {
		t.Fatalf("after 100 observations of 64: %d, want about 64", v)
	}
}

// TestSizeSteady: an observation equal to the average leaves it as it is
// (the update skips its write then; the value must not drift either way).
func TestSizeSteady(t *testing.T) {
	var s Size
	for range 1000 {
		s.Observe(35)
	}
	if v := s.Value(); v != 35 {
		t.Fatalf("after 1000 observations of 35: %d, want 35", v)
	}
	s.Observe(36)
	if v := s.Value(); v != 35 {
		t.Fatalf("after one 36: %d, want 35 ((36-35)/8 rounds to 0)", v)
	}
	s.Observe(35 + 80)
	if v := s.Value(); v != 45 {
		t.Fatalf("after one 115: %d, want 45", v)
	}
}
