package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

// notifyPoll is the poll interval of the waits in the notification tests:
// far longer than the tests' bound, so that a waiter answered within the
// bound was woken by the store's notification, not by a poll.
const notifyPoll = 2 * time.Minute

// notifyBound is how long after the holder's Complete or Release a woken
// waiter must have its answer: generous, for a loaded machine, and far
// below notifyPoll.
const notifyBound = 20 * time.Second

// Counted forwards to a Store and its Notifier and counts Reserves, so
// that a test can tell when its waiters are asleep (a waiter reserves,
// subscribes, reserves again and sleeps).
type Counted struct {
	keystore.Store
	reserves atomic.Int64
}

// Reserve counts the call and forwards it.
func (c *Counted) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	c.reserves.Add(1)
	return c.Store.Reserve(ctx, key, fp, lease)
}

// Notify forwards to the store's [keystore.Notifier].
func (c *Counted) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return keystore.Notify(ctx, c.Store, key)
}

// Peek forwards to the store's [keystore.Peeker]; peeks are not counted.
func (c *Counted) Peek(ctx context.Context, key string, fp []byte) (keystore.Claim, bool) {
	return keystore.Peek(ctx, c.Store, key, fp)
}

// Unwrap returns the store.
func (c *Counted) Unwrap() keystore.Store { return c.Store }

// Reserves is the number of Reserve calls so far.
func (c *Counted) Reserves() int64 { return c.reserves.Load() }

// AwaitResult starts a waiter of key on s that only a notification can
// answer in time (keystore.Await with polls an hour apart) and returns
// the channel of its verdict: nil when Await answered Done with result
// want, else what went wrong.
func AwaitResult(ctx context.Context, s keystore.Store, key, want string) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := keystore.Await(ctx, s, key, nil, time.Hour, keystore.Wait{Min: time.Hour, Max: time.Hour})
		if err == nil && (c.State != keystore.Done || string(c.Result) != want) {
			err = fmt.Errorf("keystore.Await of %q: %v %q, want Done %q", key, c.State, c.Result, want)
		}
		done <- err
	}()
	return done
}

// testNotify checks a [keystore.Notifier]: waiters of several keys, in
// the default scope and in a named one, asleep for a poll interval far
// longer than the test, are all answered soon after the holder completes
// each key; on a released key one waiter takes it over, and the others
// are answered when it completes. A store without Notifier is reported
// with t.Log (its waiters poll).
func testNotify(t *testing.T, s keystore.Store, _ config) {
	if !keystore.CanNotify(s) {
		t.Logf("%T does not implement keystore.Notifier: its waiters poll", s)
		return
	}
	ctx := testCtx(t)
	if _, stop, err := keystore.Notify(ctx, s, newKey("notify")); errors.Is(err, errors.ErrUnsupported) {
		t.Logf("%T cannot notify as configured (%v): its waiters poll", s, err)
		return
	} else if err != nil {
		t.Fatalf("Notify: %v", err)
	} else {
		stop()
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := keystore.Notify(cctx, s, newKey("notify")); err == nil {
		t.Fatal("Notify with a cancelled ctx: nil error")
	}
	views := []keystore.Store{s}
	if _, ok := s.(keystore.Scoper); ok {
		v, err := keystore.Scope(s, "notify-scope")
		noErr(t, "Scope", err)
		views = append(views, v)
	}
	for i, v := range views {
		for _, release := range []bool{false, true} {
			t.Run(fmt.Sprintf("view%d/release=%v", i, release), func(t *testing.T) {
				wakeWaiters(t, v, release)
			})
		}
	}
}

// wakeWaiters runs 3 keys × 4 waiters on s (see testNotify).
func wakeWaiters(t *testing.T, s keystore.Store, release bool) {
	const keys, waiters = 3, 4
	ctx := testCtx(t)
	cs := &Counted{Store: s}
	w := keystore.Wait{Min: notifyPoll, Max: notifyPoll, Timeout: 2 * notifyPoll}
	type answer struct {
		c   keystore.Claim
		err error
		at  time.Time
	}
	holders := make([]keystore.Claim, keys)
	answers := make([][]answer, keys)
	var wg sync.WaitGroup
	for k := range keys {
		key := newKey("notify")
		holders[k] = reserve(t, s, key, nil, long)
		wantState(t, holders[k], keystore.Acquired)
		answers[k] = make([]answer, waiters)
		for i := range waiters {
			wg.Go(func() {
				c, err := keystore.Await(ctx, cs, key, nil, long, w)
				answers[k][i] = answer{c, err, time.Now()}
				if err == nil && c.State == keystore.Acquired {
					// The taker completes, which answers the others.
					err = cs.Complete(ctx, c, []byte("taken"), long)
					if err != nil {
						t.Errorf("Complete by the waiter that took %q over: %v", key, err)
					}
				}
			})
		}
	}
	// Each waiter reserves, subscribes, reserves again and sleeps: wait
	// until all have reserved twice, so that the holders' calls below
	// find them asleep (or about to be, subscribed).
	waitFor(t, "waiters asleep", func() bool { return cs.Reserves() >= keys*waiters*2 })
	start := time.Now()
	for _, h := range holders {
		if release {
			noErr(t, "Release", s.Release(ctx, h))
		} else {
			noErr(t, "Complete", s.Complete(ctx, h, []byte("first"), long))
		}
	}
	wg.Wait()
	for k, as := range answers {
		taken := 0
		for _, a := range as {
			noErr(t, "Await", a.err)
			if took := a.at.Sub(start); took > notifyBound {
				t.Fatalf("waiter answered %v after the holder's call, want well within %v (poll %v): not woken by the notification", took, notifyBound, notifyPoll)
			}
			switch {
			case a.c.State == keystore.Acquired && release:
				taken++
			case a.c.State == keystore.Done && !release && string(a.c.Result) == "first":
			case a.c.State == keystore.Done && release && string(a.c.Result) == "taken":
			default:
				t.Fatalf("key %d: waiter got %v %q (release=%v)", k, a.c.State, a.c.Result, release)
			}
		}
		if release && taken != 1 {
			t.Fatalf("key %d: %d waiters took the released key over, want 1", k, taken)
		}
	}
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
