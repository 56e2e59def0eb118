package keystore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

type callKey struct{}

// TestDetachHidesCancellationKeepsValues: a detached call context carries
// the caller's values, outlives the caller's cancellation, reports its
// deadline, and ends with Canceled when released.
func TestDetachHidesCancellationKeepsValues(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), callKey{}, "v"))
	dctx, end := keystore.Detach(parent)
	cancel(errors.New("client gone"))
	if err := dctx.Err(); err != nil {
		t.Fatalf("Err after the caller's cancellation = %v, want nil", err)
	}
	if got := context.Cause(dctx); got != nil {
		t.Fatalf("Cause = %v, want nil (the caller's cause is hidden)", got)
	}
	if v := dctx.Value(callKey{}); v != "v" {
		t.Fatalf("Value = %v, want the caller's", v)
	}
	if d, ok := dctx.Deadline(); !ok || time.Until(d) <= 0 || time.Until(d) > keystore.CallTimeout {
		t.Fatalf("Deadline = %v, %v; want within CallTimeout", d, ok)
	}
	child, stopChild := context.WithCancel(dctx) // registers through AfterFunc
	defer stopChild()
	ran := make(chan struct{})
	context.AfterFunc(dctx, func() { close(ran) })
	end()
	if err := dctx.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after end = %v, want Canceled", err)
	}
	hang := time.After(2 * time.Minute)
	for _, ch := range []<-chan struct{}{dctx.Done(), child.Done(), ran} {
		select {
		case <-ch:
		case <-hang:
			t.Fatal("the context, its child or its AfterFunc did not end after end()")
		}
	}
	end() // again: nothing
}

// TestDetachForEndsAtItsTimeout: past the timeout, Err is DeadlineExceeded
// whether or not Done was ever asked for, and Done closes once asked for.
func TestDetachForEndsAtItsTimeout(t *testing.T) {
	lazy, endLazy := keystore.DetachFor(context.Background(), time.Millisecond)
	defer endLazy()
	timed, endTimed := keystore.DetachFor(context.Background(), time.Millisecond)
	defer endTimed()
	select {
	case <-timed.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("Done did not close after the timeout")
	}
	if err := timed.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", err)
	}
	// lazy never started a timer: its deadline has passed by now too.
	if d, _ := lazy.Deadline(); time.Now().Before(d) {
		t.Fatalf("deadline %v not passed", d)
	}
	if err := lazy.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err without a timer = %v, want DeadlineExceeded", err)
	}
	select {
	case <-lazy.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("Done asked for after the deadline did not close")
	}
	endLazy()
	if err := lazy.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after end past the deadline = %v, want DeadlineExceeded (the first reason stays)", err)
	}
}

// TestDetachAllocations: a call that only checks Err (a store answering
// from memory) pays for the call context alone, not for a
// context.WithoutCancel; reading values builds that once (and
// context's withoutCancelCtx.Value allocates a little on each call).
func TestDetachAllocations(t *testing.T) {
	parent := context.WithValue(context.Background(), callKey{}, "v")
	if n := testing.AllocsPerRun(100, func() {
		c, end := keystore.Detach(parent)
		_ = c.Err()
		end()
	}); n > 1 {
		t.Errorf("Detach, Err, end: %v allocations, want at most 1", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		c, end := keystore.Detach(parent)
		_ = c.Value(callKey{})
		_ = c.Value(callKey{})
		end()
	}); n > 4 {
		t.Errorf("Detach and two Values: %v allocations, want at most 4", n)
	}
}
