package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

// KeyLoad runs Reserve → Complete on fresh keys from several goroutines
// against a key store, and re-reserves keys completed earlier as a
// redelivery would, while a test breaks the store's servers. It records
// what the docs promise about failures: acknowledged completions that come
// back absent (lost), effects run again after an acknowledged completion
// (doubled), and fencing tokens that are not above every earlier token of
// their key (token regressions).
type KeyLoad struct {
	s     keystore.Store
	lease time.Duration
	watch func(key string) bool
	stop  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	keys    map[string]*loadKey
	okTimes []time.Time // successful calls on watched keys
	mark    time.Time

	calls, refused, doubled, regressions atomic.Int64
	refusedAtMark                        int64
}

type loadKey struct {
	acked  bool   // a Complete returned nil
	tokens uint64 // highest token seen
	runs   int    // Acquired claims (effect runs)
}

// KeyLoadReport is what [KeyLoad.Verify] found.
type KeyLoadReport struct {
	Calls, Refused int64 // store calls, and those that returned an error
	RefusedBefore  int64 // of Refused, before Mark
	Acked          int   // keys whose Complete returned nil
	Lost           int   // acknowledged keys that Reserve found not done
	Doubled        int64 // Acquired claims on keys already acknowledged, during the load or at Verify
	Regressions    int64 // Acquired tokens not above an earlier token of the same key
	// Outage is the longest time after Mark without a successful call on
	// a watched key.
	Outage time.Duration
}

// String is the report on one line, for t.Log.
func (r KeyLoadReport) String() string {
	return fmt.Sprintf("calls %d, refused %d (%d before the fault), acknowledged keys %d, lost %d, doubled %d, token regressions %d, outage %.1fs",
		r.Calls, r.Refused, r.RefusedBefore, r.Acked, r.Lost, r.Doubled, r.Regressions, r.Outage.Seconds())
}

// StartKeyLoad starts workers goroutines on s, with keys named
// prefix-wG-I and leases of lease. watch picks the keys whose successful
// calls count for the outage (those on the server the test kills); nil
// watches all.
func StartKeyLoad(s keystore.Store, prefix string, workers int, lease time.Duration, watch func(key string) bool) *KeyLoad {
	if watch == nil {
		watch = func(string) bool { return true }
	}
	l := &KeyLoad{s: s, lease: lease, watch: watch, stop: make(chan struct{}), keys: map[string]*loadKey{}}
	for g := range workers {
		l.wg.Go(func() { l.work(fmt.Sprintf("%s-w%d", prefix, g)) })
	}
	return l
}

// Mark records the moment of the fault; the outage is measured from it.
func (l *KeyLoad) Mark() {
	l.mu.Lock()
	l.mark = time.Now()
	l.refusedAtMark = l.refused.Load()
	l.mu.Unlock()
}

// Acked returns how many keys have been acknowledged so far.
func (l *KeyLoad) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, k := range l.keys {
		if k.acked {
			n++
		}
	}
	return n
}

func (l *KeyLoad) work(prefix string) {
	var done []string // this worker's acknowledged keys
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		key := fmt.Sprintf("%s-%d", prefix, i)
		if l.once(key) {
			done = append(done, key)
		}
		if len(done) > 0 { // a redelivery of a recent key
			l.once(done[max(0, len(done)-1-rand.IntN(min(len(done), 50)))])
		}
	}
}

// once reserves key and completes it if acquired; it reports whether the
// key is acknowledged afterwards.
func (l *KeyLoad) once(key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	l.calls.Add(1)
	c, err := l.s.Reserve(ctx, key, nil, l.lease)
	if err != nil {
		l.refused.Add(1)
		return false
	}
	l.ok(key)
	switch c.State {
	case keystore.Done:
		return true
	case keystore.InProgress:
		return false
	}
	l.acquired(key, c.Token)
	l.calls.Add(1)
	if err := l.s.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
		l.refused.Add(1)
		return false
	}
	l.ok(key)
	l.mu.Lock()
	l.keys[key].acked = true
	l.mu.Unlock()
	return true
}

// acquired records an Acquired claim: its token must be above every token
// the key had, and an acknowledged key must never be acquired again.
func (l *KeyLoad) acquired(key string, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		k = &loadKey{}
		l.keys[key] = k
	}
	if k.runs > 0 && token <= k.tokens {
		l.regressions.Add(1)
	}
	if k.acked {
		l.doubled.Add(1)
	}
	k.tokens = max(k.tokens, token)
	k.runs++
}

func (l *KeyLoad) ok(key string) {
	if !l.watch(key) {
		return
	}
	l.mu.Lock()
	l.okTimes = append(l.okTimes, time.Now())
	l.mu.Unlock()
}

// Stop stops the workers and waits for them.
func (l *KeyLoad) Stop() {
	close(l.stop)
	l.wg.Wait()
}

// Verify (after Stop) reserves every acknowledged key once more, on s (the
// loaded store, or a view of the same keys that does not wait for
// replicas the cluster no longer has): each must be done. A key found
// acquired is lost, its token is checked like any other, and it is
// released.
func (l *KeyLoad) Verify(ctx context.Context, s keystore.Store) (KeyLoadReport, error) {
	l.mu.Lock()
	var acked []string
	for key, k := range l.keys {
		if k.acked {
			acked = append(acked, key)
		}
	}
	l.mu.Unlock()
	r := KeyLoadReport{Acked: len(acked)}
	for _, key := range acked {
		var c keystore.Claim
		var err error
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) { // the cluster may still settle
			if c, err = s.Reserve(ctx, key, nil, time.Minute); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return r, fmt.Errorf("verify %s: %w", key, err)
		}
		if c.State != keystore.Done {
			r.Lost++
		}
		if c.State == keystore.Acquired {
			l.acquired(key, c.Token)
			if err := s.Release(ctx, c); err != nil {
				return r, fmt.Errorf("verify %s: release: %w", key, err)
			}
		}
	}
	r.Calls, r.Refused = l.calls.Load(), l.refused.Load()
	r.Doubled, r.Regressions = l.doubled.Load(), l.regressions.Load()
	l.mu.Lock()
	defer l.mu.Unlock()
	r.RefusedBefore = l.refusedAtMark
	if !l.mark.IsZero() {
		times := slices.Clone(l.okTimes)
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		prev := l.mark
		for _, t := range times {
			if t.Before(l.mark) {
				continue
			}
			r.Outage = max(r.Outage, t.Sub(prev))
			prev = t
		}
	}
	return r, nil
}

// Soak is how long failover tests run load before and after a fault:
// half a second, or IDEM_SOAK (a Go duration) for longer runs (make soak).
func Soak(t testing.TB) time.Duration {
	if v := os.Getenv("IDEM_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("IDEM_SOAK=%q: %v", v, err)
		}
		return d
	}
	return 500 * time.Millisecond
}
