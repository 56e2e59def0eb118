package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// notifying wraps a store and its Notifier, counting Reserves and
// subscriptions; silent replaces the store's channel by one never closed,
// and fail makes Notify fail.
type notifying struct {
	keystore.Store
	reserves, subs, stops atomic.Int64
	silent, fail          bool
}

func (n *notifying) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	n.reserves.Add(1)
	return n.Store.Reserve(ctx, key, fp, lease)
}

func (n *notifying) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if n.fail {
		return nil, nil, errors.New("subscription down")
	}
	ch, stop, err := keystore.Notify(ctx, n.Store, key)
	if err != nil {
		return nil, nil, err
	}
	n.subs.Add(1)
	if n.silent {
		ch = make(chan struct{})
	}
	return ch, func() { n.stops.Add(1); stop() }, nil
}

func (n *notifying) Unwrap() keystore.Store { return n.Store }

// TestAwaitWokenByNotification: waiters asleep for a poll interval of
// minutes are answered soon after the holder completes or releases the
// key, and every subscription is stopped when Await returns.
func TestAwaitWokenByNotification(t *testing.T) {
	t.Parallel()
	for _, release := range []bool{false, true} {
		t.Run(fmt.Sprint("release=", release), func(t *testing.T) {
			t.Parallel()
			mem, holder := held(t)
			s := &notifying{Store: mem}
			const waiters = 5
			w := keystore.Wait{Min: time.Minute, Max: time.Minute, Timeout: 5 * time.Minute}
			var wg sync.WaitGroup
			var took [waiters]time.Duration
			var start time.Time
			for i := range waiters {
				wg.Go(func() {
					c, err := keystore.Await(context.Background(), s, "k", []byte("fp"), time.Minute, w)
					took[i] = time.Since(start)
					if err != nil {
						t.Errorf("Await: %v", err)
						return
					}
					if c.State == keystore.Acquired {
						if err := s.Complete(context.Background(), c, []byte("second"), time.Hour); err != nil {
							t.Errorf("Complete: %v", err)
						}
					}
				})
			}
			testenv.WaitFor(t, time.Minute, "waiters asleep", func() bool { return s.reserves.Load() >= 2*waiters })
			start = time.Now()
			var err error
			if release {
				err = mem.Release(context.Background(), holder)
			} else {
				err = mem.Complete(context.Background(), holder, []byte("first"), time.Hour)
			}
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for _, d := range took {
				if d > 20*time.Second {
					t.Fatalf("a waiter was answered %v after the holder's call: not woken by the notification (poll %v)", d, w.Min)
				}
			}
			if subs, stops := s.subs.Load(), s.stops.Load(); subs != stops || subs < waiters {
				t.Fatalf("%d subscriptions, %d stopped; want all of at least %d stopped", subs, stops, waiters)
			}
		})
	}
}

// TestAwaitPollsWithoutNotification: a notification never sent, or a
// store that cannot subscribe, costs polls, never the answer.
func TestAwaitPollsWithoutNotification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		silent, fail bool
	}{{"silent", true, false}, {"failing", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem, holder := held(t)
			s := &notifying{Store: mem, silent: tc.silent, fail: tc.fail}
			done := make(chan struct{})
			go func() {
				defer close(done)
				testenv.WaitFor(t, time.Minute, "a poll", func() bool { return s.reserves.Load() >= 3 })
				if err := mem.Complete(context.Background(), holder, []byte("r"), time.Hour); err != nil {
					t.Error(err)
				}
			}()
			w := keystore.Wait{Min: time.Millisecond, Max: 20 * time.Millisecond, Timeout: time.Minute}
			c, err := keystore.Await(context.Background(), s, "k", []byte("fp"), time.Minute, w)
			<-done
			if err != nil || c.State != keystore.Done || string(c.Result) != "r" {
				t.Fatalf("Await: %v %q %v, want done r", c.State, c.Result, err)
			}
			if subs, stops := s.subs.Load(), s.stops.Load(); subs != stops {
				t.Fatalf("%d subscriptions, %d stopped", subs, stops)
			}
		})
	}
}

// TestAwaitNotifyRespectsContext: a waiter whose ctx ends while it sleeps
// subscribed returns at once with ErrInProgress and ctx's error, its
// subscription stopped.
func TestAwaitNotifyRespectsContext(t *testing.T) {
	t.Parallel()
	mem, _ := held(t)
	s := &notifying{Store: mem}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		testenv.WaitFor(t, time.Minute, "the waiter asleep", func() bool { return s.reserves.Load() >= 2 })
		cancel()
	}()
	_, err := keystore.Await(ctx, s, "k", []byte("fp"), time.Minute, keystore.Wait{Min: time.Hour, Max: time.Hour})
	if !errors.Is(err, keystore.ErrInProgress) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Await: %v, want ErrInProgress and context.Canceled", err)
	}
	if subs, stops := s.subs.Load(), s.stops.Load(); subs != 1 || stops != 1 {
		t.Fatalf("%d subscriptions, %d stopped, want 1 and 1", subs, stops)
	}
}

// TestWatchers: one channel a key shared by its waiters, closed by Signal
// and replaced; onLast runs once, when the last waiter of a key stops; a
// stop called twice counts once.
func TestWatchers(t *testing.T) {
	t.Parallel()
	var w keystore.Watchers
	var lasts atomic.Int64
	onLast := func() { lasts.Add(1) }
	a1, stopA1, first := w.Add("a", onLast)
	if !first {
		t.Fatal("first waiter of a not first")
	}
	a2, stopA2, first := w.Add("a", onLast)
	if first || a1 != a2 {
		t.Fatalf("second waiter of a: first %v, same channel %v", first, a1 == a2)
	}
	b, stopB, _ := w.Add("b", onLast)
	if !w.Watching() || w.Len() != 2 {
		t.Fatalf("Watching %v, Len %d, want true, 2", w.Watching(), w.Len())
	}
	if !w.Signal("a") || w.Signal("c") {
		t.Fatal("Signal: wrong report of waiters")
	}
	select {
	case <-a1:
	default:
		t.Fatal("a's channel not closed by Signal")
	}
	select {
	case <-b:
		t.Fatal("b's channel closed by a's Signal")
	default:
	}
	a3, stopA3, _ := w.Add("a", onLast)
	if a3 == a1 {
		t.Fatal("a later waiter got the closed channel")
	}
	stopA1()
	stopA1()
	stopA2()
	if lasts.Load() != 0 {
		t.Fatal("onLast ran while a had a waiter")
	}
	stopA3()
	if lasts.Load() != 1 {
		t.Fatalf("onLast ran %d times after a's last stop, want 1", lasts.Load())
	}
	w.SignalAll()
	<-b
	stopB()
	if w.Watching() || w.Len() != 0 || len(w.Keys()) != 0 {
		t.Fatal("keys left after every stop")
	}
}

// TestNotifyUnsupported: Notify on a store without Notifier fails with
// errors.ErrUnsupported, and Await polls it.
func TestNotifyUnsupported(t *testing.T) {
	t.Parallel()
	s := &halfway{Store: dbtest.MemStore(t)}
	if keystore.CanNotify(s) {
		t.Fatal("CanNotify on a store without Notifier")
	}
	if _, _, err := keystore.Notify(context.Background(), s, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Notify: %v, want errors.ErrUnsupported", err)
	}
	if !keystore.CanNotify(dbtest.MemStore(t)) {
		t.Fatal("memstore cannot notify")
	}
}

// A waiter can subscribe to a key's next change itself: subscribe first,
// then look, so that a change in between is not missed.
func ExampleNotify() {
	s, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	holder, err := s.Reserve(ctx, "invoice-8", nil, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	changed, stop, err := keystore.Notify(ctx, s, "invoice-8")
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	go func() { _ = s.Complete(context.Background(), holder, []byte("sent"), time.Hour) }()
	<-changed
	c, err := s.Reserve(ctx, "invoice-8", nil, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.State, string(c.Result))
	// Output: done sent
}

// A store's Notify can keep its waiters in a Watchers: one channel a key,
// closed when the store changes the key.
func ExampleWatchers() {
	var w keystore.Watchers
	changed, stop, first := w.Add("invoice-9", nil)
	defer stop()
	fmt.Println("first waiter:", first)
	w.Signal("invoice-9") // from the store's Complete or Release
	<-changed
	fmt.Println("woken")
	// Output:
	// first waiter: true
	// woken
}
