package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

// cancelRounds is how many keys testCancelMidCall reserves, each under a
// context cancelled at a random moment.
const cancelRounds = 3000

// testCancelMidCall cancels Reserve, Complete and Release at random moments
// (before the call, during it, after it) and then checks that each answer
// was true: a Reserve that returned an error holds nothing (the key is
// absent, not in progress for a whole lease with no one able to release
// it); a Complete or Release that returned an error wrote nothing (the key
// is still in progress under the caller's claim, which releases it); one
// that returned nil did what it says.
func testCancelMidCall(t *testing.T, s keystore.Store, _ config) {
	bg := testCtx(t)
	prefix := newKey("cancel-mid")
	var mu sync.Mutex
	var problems []string
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	var stats struct {
		sync.Mutex
		reserveErr, reserveOK, completeErr, releaseErr int
	}
	fanOut(cancelRounds, func(i int) {
		key := fmt.Sprintf("%s-%d", prefix, i)
		c, err := s.Reserve(cancelSoon(bg), key, nil, long)
		if err != nil {
			stats.Lock()
			stats.reserveErr++
			stats.Unlock()
			// The caller holds no claim: the key must be free.
			r, rerr := s.Reserve(bg, key, nil, long)
			if rerr != nil || r.State != keystore.Acquired {
				report("Reserve(%q) failed with %v, yet the key is %v (%v) afterwards: held for a whole lease by a claim nobody has", key, err, r.State, rerr)
			}
			return
		}
		stats.Lock()
		stats.reserveOK++
		stats.Unlock()
		if c.State != keystore.Acquired {
			report("Reserve(%q) of a fresh key answered %v", key, c.State)
			return
		}
		complete, failed := i%2 == 0, &stats.releaseErr
		if complete {
			failed = &stats.completeErr
		}
		checkCancelled(bg, s, c, complete, report, &stats.Mutex, failed)
	})
	t.Logf("%d Reserves failed, %d succeeded; %d Completes and %d Releases failed", stats.reserveErr, stats.reserveOK, stats.completeErr, stats.releaseErr)
	for _, p := range problems {
		t.Error(p)
	}
}

// checkCancelled runs Complete (complete) or Release of c under a context
// cancelled at a random moment, and checks that its answer was true: nil
// means the key is done (Complete) or free (Release); an error means the key
// is still in progress under c, which then releases it. n counts the errors.
func checkCancelled(bg context.Context, s keystore.Store, c keystore.Claim, complete bool, report func(string, ...any), mu *sync.Mutex, n *int) {
	op, did := "Release", func(r keystore.Claim) bool { return r.State == keystore.Acquired }
	var err error
	if complete {
		op, did = "Complete", func(r keystore.Claim) bool { return r.State == keystore.Done && string(r.Result) == "r" }
		err = s.Complete(cancelSoon(bg), c, []byte("r"), long)
	} else {
		err = s.Release(cancelSoon(bg), c)
	}
	r, rerr := s.Reserve(bg, c.Key, nil, long)
	switch {
	case rerr != nil:
		report("Reserve(%q) after a cancelled %s: %v", c.Key, op, rerr)
	case err == nil && !did(r):
		report("%s(%q) returned nil, yet the key is %+v", op, c.Key, r)
	case err != nil && r.State != keystore.InProgress:
		report("%s(%q) failed with %v, yet the key is %v: the error was not the whole truth", op, c.Key, err, r.State)
	case err != nil:
		mu.Lock()
		*n++
		mu.Unlock()
		if rerr := s.Release(bg, c); rerr != nil {
			report("Release(%q) after a failed %s: %v", c.Key, op, rerr)
		}
	}
	if errors.Is(rerr, context.Canceled) {
		report("a call under a live context failed with context.Canceled")
	}
}

// cancelSoon returns a child of ctx cancelled at a random moment in the
// next few hundred microseconds, sometimes at once: before, during or after
// the call it is given to.
func cancelSoon(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	if rand.N(8) == 0 {
		cancel()
		return ctx
	}
	time.AfterFunc(time.Duration(rand.N(400))*time.Microsecond, cancel)
	return ctx
}

// testDoCancelled runs keystore.Do under contexts cancelled at random
// moments: a Do that returned an error did not run fn and left the key
// absent; one that returned a result left it done.
func testDoCancelled(t *testing.T, s keystore.Store, _ config) {
	bg := testCtx(t)
	prefix := newKey("do-cancel")
	errs := make(chan error, cancelRounds/3)
	fanOut(cancelRounds/3, func(i int) {
		key := fmt.Sprintf("%s-%d", prefix, i)
		ran := false
		_, _, err := keystore.Do(cancelSoon(bg), s, key, nil, func(context.Context) ([]byte, error) {
			ran = true
			return []byte("r"), nil
		}, keystore.WithLease(long), keystore.WithTTL(long))
		r, rerr := s.Reserve(bg, key, nil, long)
		switch {
		case rerr != nil:
			errs <- fmt.Errorf("Reserve(%q) after a cancelled Do: %w", key, rerr)
		case err != nil && (ran || r.State != keystore.Acquired):
			errs <- fmt.Errorf("Do(%q) failed with %v (fn ran: %v), yet the key is %v afterwards", key, err, ran, r.State)
		case err == nil && (!ran || r.State != keystore.Done):
			errs <- fmt.Errorf("Do(%q) succeeded (fn ran: %v), yet the key is %v afterwards", key, ran, r.State)
		}
	})
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
}

// fanOut runs f(0) … f(n-1) on 16 goroutines and returns when all are done.
func fanOut(n int, f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				f(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}
