package handlerctx_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// abortSetup returns a store (closed when t ends) and an Abort.
func abortSetup(t *testing.T) (keystore.Store, *handlerctx.Abort) {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, &handlerctx.Abort{}
}

// TestAbortEndsRunsInFlight links runs into an Abort, stops some of them
// (the first, the last and one in the middle of its list), aborts, and
// checks that exactly the runs still in flight ended with ErrAborted, and
// that a run started after Abort ends at once.
func TestAbortEndsRunsInFlight(t *testing.T) {
	s, a := abortSetup(t)
	cfg := handlerctx.Config{Abort: a}
	const n = 7
	ctxs := make([]context.Context, n)
	runs := make([]*handlerctx.Run, n)
	for i := range n {
		ctxs[i], runs[i] = handlerctx.Start(context.Background(), s, "k", keystore.Claim{}, 0, cfg)
	}
	stopped := map[int]bool{0: true, 3: true, n - 1: true}
	for i := range stopped {
		runs[i].Stop()
	}
	a.Abort()
	for i, ctx := range ctxs {
		cause := context.Cause(ctx)
		switch {
		case stopped[i] && !errors.Is(cause, context.Canceled):
			t.Errorf("run %d stopped before Abort: cause %v, want context.Canceled", i, cause)
		case !stopped[i] && !errors.Is(cause, handlerctx.ErrAborted):
			t.Errorf("run %d in flight at Abort: cause %v, want ErrAborted", i, cause)
		}
	}
	ctx, run := handlerctx.Start(context.Background(), s, "k", keystore.Claim{}, 0, cfg)
	if cause := context.Cause(ctx); !errors.Is(cause, handlerctx.ErrAborted) {
		t.Errorf("run started after Abort: cause %v, want ErrAborted", cause)
	}
	run.Stop()
	a.Abort() // again: nothing to do
}

// TestAbortConcurrent starts and stops runs from several goroutines while
// Abort is called, under -race: every run that had not stopped by the
// time Abort returned has ended, and Stop after Abort does not block.
func TestAbortConcurrent(t *testing.T) {
	s, a := abortSetup(t)
	cfg := handlerctx.Config{Abort: a}
	var wg sync.WaitGroup
	start := make(chan struct{})
	live := make(chan context.Context, 400)
	for range 4 {
		wg.Go(func() {
			<-start
			for i := range 100 {
				ctx, run := handlerctx.Start(context.Background(), s, "k", keystore.Claim{}, 0, cfg)
				if i%2 == 0 {
					run.Stop()
					continue
				}
				live <- ctx // left running until after Abort
			}
		})
	}
	close(start)
	a.Abort()
	wg.Wait()
	close(live)
	for ctx := range live {
		if ctx.Err() == nil {
			t.Fatal("a run still in flight after Abort has not ended")
		}
	}
}
