package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

// BenchWait is the wait of [BenchmarkWake]: keystore.Await's polls from
// 10 ms up to 250 ms with jitter, as idemhttp's and Do's WithWait.
var BenchWait = keystore.Wait{Min: 10 * time.Millisecond, Max: 250 * time.Millisecond, Timeout: time.Minute}

// pollOnly hides a store's Notifier, so that Await polls it.
type pollOnly struct{ keystore.Store }

// BenchmarkWake measures how long after a holder's Complete its waiters'
// keystore.Await returns: with the store's notifications, and polling
// only (the same store with its Notifier hidden), alternately in the same
// run, with 1 and 16 waiters a key. Each sample lets the waiters fall
// asleep, waits 0 to 300 ms more (the polls back off meanwhile), then
// completes; the latency is from the return of Complete (the completion
// is durable) to the return of the last waiter, 0 if it returned first. It reports the 50th and 99th
// percentiles in ms (wake-p50-ms, wake-p99-ms, poll-p50-ms, poll-p99-ms)
// and the median Complete (complete-p50-ms). Run it with a fixed count
// (-benchtime=100x); newStore is called once a sub-benchmark.
func BenchmarkWake(b *testing.B, newStore func(b *testing.B) keystore.Store) {
	for _, waiters := range []int{1, 16} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			s := newStore(b)
			if !keystore.CanNotify(s) {
				b.Logf("%T cannot notify: both sides poll", s)
			}
			var wake, poll, complete []time.Duration
			for i := 0; b.Loop(); i++ {
				for j := range 2 {
					if (i+j)%2 == 0 {
						x := wakeSample(b, s, waiters)
						wake, complete = append(wake, x.wake), append(complete, x.complete)
					} else {
						x := wakeSample(b, pollOnly{s}, waiters)
						poll, complete = append(poll, x.wake), append(complete, x.complete)
					}
				}
			}
			b.ReportMetric(percentile(complete, 50), "complete-p50-ms")
			b.ReportMetric(percentile(wake, 50), "wake-p50-ms")
			b.ReportMetric(percentile(wake, 99), "wake-p99-ms")
			b.ReportMetric(percentile(poll, 50), "poll-p50-ms")
			b.ReportMetric(percentile(poll, 99), "poll-p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// wakeSample is one sample of BenchmarkWake.
func wakeSample(b *testing.B, s keystore.Store, waiters int) sample {
	ctx := context.Background()
	key := newKey("wake")
	holder, err := s.Reserve(ctx, key, nil, time.Minute)
	if err != nil || holder.State != keystore.Acquired {
		b.Fatalf("Reserve: %v %v", holder.State, err)
	}
	cs := &Counted{Store: s}
	var (
		wg   sync.WaitGroup
		last atomic.Int64 // UnixNano of the last waiter's return
	)
	var target keystore.Store = cs
	if _, ok := s.(pollOnly); ok {
		target = pollOnly{cs}
	}
	for range waiters {
		wg.Go(func() {
			c, err := keystore.Await(ctx, target, key, nil, time.Minute, BenchWait)
			if err != nil || c.State != keystore.Done {
				b.Errorf("Await: %v %v", c.State, err)
			}
			now := time.Now().UnixNano()
			for {
				if old := last.Load(); old >= now || last.CompareAndSwap(old, now) {
					break
				}
			}
		})
	}
	// Asleep: two Reserves a waiter (the notifying side reserves again
	// after subscribing; the polling side has polled once).
	for cs.Reserves() < int64(2*waiters) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(rand.N(300 * time.Millisecond))
	start := time.Now()
	if err := s.Complete(ctx, holder, []byte("r"), time.Minute); err != nil {
		b.Fatal(err)
	}
	done := time.Now()
	wg.Wait()
	return sample{complete: done.Sub(start), wake: max(0, time.Duration(last.Load()-done.UnixNano()))}
}

// sample is one Complete's duration and its waiters' latency after it.
type sample struct{ complete, wake time.Duration }

// percentile is the p-th percentile of ds, in ms.
func percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return float64(s[max(i, 0)]) / float64(time.Millisecond)
}
