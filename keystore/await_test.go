package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// held returns a store in which "k" is in progress under another holder,
// and that holder's claim.
func held(t *testing.T) (keystore.Store, keystore.Claim) {
	t.Helper()
	s := dbtest.MemStore(t)
	c, err := s.Reserve(context.Background(), "k", []byte("fp"), time.Hour)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("first Reserve: %v %v", c.State, err)
	}
	return s, c
}

// TestAwaitInProgress: every way Await stops waiting for a key that stays
// in progress returns the holder's claim and an error matching
// ErrInProgress; a ctx that ends while it waits matches ctx's error too.
func TestAwaitInProgress(t *testing.T) {
	t.Parallel()
	poll := keystore.Wait{Min: time.Millisecond, Max: 5 * time.Millisecond}
	for _, tc := range []struct {
		name     string
		w        keystore.Wait
		ctxAfter time.Duration // 0: ctx never ends
		cause    error
		atLeast  time.Duration
	}{
		{name: "no wait", w: keystore.Wait{}},
		{name: "timeout", w: keystore.Wait{Min: poll.Min, Max: poll.Max, Timeout: 60 * time.Millisecond}, atLeast: 60 * time.Millisecond},
		{name: "ctx ends", w: poll, ctxAfter: 30 * time.Millisecond, cause: context.DeadlineExceeded, atLeast: 30 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, holder := held(t)
			ctx := context.Background()
			start := time.Now() // before the context's deadline starts counting
			if tc.ctxAfter > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxAfter)
				defer cancel()
			}
			c, err := keystore.Await(ctx, s, "k", []byte("fp"), time.Minute, tc.w)
			took := time.Since(start)
			if !errors.Is(err, keystore.ErrInProgress) || (tc.cause != nil && !errors.Is(err, tc.cause)) {
				t.Fatalf("Await: %v, want ErrInProgress (and %v)", err, tc.cause)
			}
			if c.State != keystore.InProgress || !c.Expires.Equal(holder.Expires) {
				t.Fatalf("claim %v expiring %v, want the holder's lease end %v", c.State, c.Expires, holder.Expires)
			}
			if took < tc.atLeast || took > tc.atLeast+5*time.Second {
				t.Fatalf("Await returned after %v, want about %v", took, tc.atLeast)
			}
			if tc.cause == nil {
				var ipe *keystore.InProgressError
				if !errors.As(err, &ipe) || ipe.Key != "k" || !ipe.Expires.Equal(holder.Expires) {
					t.Fatalf("Await: %v, want an *InProgressError for k", err)
				}
			}
		})
	}
}

// TestAwaitTakesOver: a waiter gets the key as soon as the holder releases
// it, and the replay as soon as the holder completes, within its Timeout.
func TestAwaitTakesOver(t *testing.T) {
	t.Parallel()
	for _, complete := range []bool{false, true} {
		s, holder := held(t)
		time.AfterFunc(20*time.Millisecond, func() {
			if complete {
				_ = s.Complete(context.Background(), holder, []byte("r"), time.Hour)
			} else {
				_ = s.Release(context.Background(), holder)
			}
		})
		w := keystore.Wait{Min: time.Millisecond, Max: 10 * time.Millisecond, Timeout: 10 * time.Second, CallTimeout: time.Second}
		c, err := keystore.Await(context.Background(), s, "k", []byte("fp"), time.Minute, w)
		want := keystore.Acquired
		if complete {
			want = keystore.Done
		}
		if err != nil || c.State != want || (complete && string(c.Result) != "r") {
			t.Fatalf("complete=%v: %v %q %v, want %v", complete, c.State, c.Result, err, want)
		}
	}
}

// TestAwaitCancelledDuringReserve: a key acquired by a Reserve during which
// ctx ended is released, and the error says so.
func TestAwaitCancelledDuringReserve(t *testing.T) {
	t.Parallel()
	mem := dbtest.MemStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &halfway{Store: mem, cancelDuring: cancel}
	if _, err := keystore.Await(ctx, s, "k", nil, time.Hour, keystore.Wait{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await: %v, want context.Canceled", err)
	}
	if c, err := mem.Reserve(context.Background(), "k", nil, time.Minute); err != nil || c.State != keystore.Acquired {
		t.Fatalf("after the cancelled Await the key is %v (%v)", c.State, err)
	}
}

// TestAwaitBadWait: a Wait that cannot be followed is refused before the
// store is touched.
func TestAwaitBadWait(t *testing.T) {
	t.Parallel()
	s := &halfway{Store: dbtest.MemStore(t)}
	for _, w := range []keystore.Wait{
		{Min: 0, Max: time.Second},
		{Min: time.Second, Max: time.Millisecond},
		{Min: -1},
		{Timeout: -1},
		{CallTimeout: -1},
	} {
		if _, err := keystore.Await(context.Background(), s, "k", nil, time.Minute, w); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Errorf("Await with %+v: %v, want idem.ErrInvalidArgument", w, err)
		}
	}
	if n := s.reserves.Load(); n != 0 {
		t.Fatalf("%d Reserves with bad waits", n)
	}
}

// Await is the wait under Do, for a caller that runs the effect itself: a
// second worker waits for the first one's result instead of failing with
// ErrInProgress, and gets the result replayed.
func ExampleAwait() {
	s, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	first, err := s.Reserve(ctx, "invoice-7", nil, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	time.AfterFunc(30*time.Millisecond, func() {
		_ = s.Complete(context.Background(), first, []byte("sent"), time.Hour)
	})
	wait := keystore.Wait{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond, Timeout: 10 * time.Second}
	c, err := keystore.Await(ctx, s, "invoice-7", nil, time.Minute, wait)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.State, string(c.Result))
	// Output: done sent
}
