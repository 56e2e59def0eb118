package together

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunReleasesTogether: no call starts before every goroutine is
// started (each call waits for all n to arrive, which deadlocks, and so
// times out, unless they run at once), and every i is called once.
func TestRunReleasesTogether(t *testing.T) {
	const n = 16
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	var calls [n]atomic.Int32
	done := make(chan struct{})
	go func() {
		Run(n, func(i int) {
			calls[i].Add(1)
			arrived.Done()
			<-all
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard, not a speed bound
		t.Fatal("the calls did not all run at once")
	}
	for i := range n {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("f(%d) called %d times, want 1", i, c)
		}
	}
}
