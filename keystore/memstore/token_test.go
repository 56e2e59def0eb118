package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// Complete and Release find a pending claim by its token (no hash of the
// key). These tests try to make that lookup accept a claim that the lookup
// by fingerprint would refuse.

// wantLost checks that err wraps ErrLeaseLost.
func wantLost(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("%s: %v, want ErrLeaseLost", what, err)
	}
}

// wantState checks key's state by a Reserve that must not take it.
func wantState(t *testing.T, s keystore.Store, key string, want keystore.State) {
	t.Helper()
	c, err := s.Reserve(context.Background(), key, nil, time.Minute)
	if err != nil || c.State != want {
		t.Fatalf("Reserve(%q): %+v %v, want %v", key, c, err, want)
	}
}

// TestTokenOfAnotherKey completes and releases keys with the tokens of other
// keys in progress, and of the same key in another scope: each is refused
// and leaves both keys in progress.
func TestTokenOfAnotherKey(t *testing.T) {
	ctx := context.Background()
	s, _ := newClocked(t)
	other, err := s.Scope("other")
	if err != nil {
		t.Fatal(err)
	}
	claims := reserveNew(t, s, "k", 200, time.Minute)
	oc, err := other.Reserve(ctx, "k0", nil, time.Minute)
	if err != nil || oc.State != keystore.Acquired {
		t.Fatal(oc, err)
	}
	for i, a := range claims {
		b := claims[(i+1)%len(claims)]
		forged := a
		forged.Token = b.Token // b's live token, under a's key
		wantLost(t, s.Complete(ctx, forged, nil, time.Hour), "Complete with another key's token")
		wantLost(t, s.Complete(ctx, forged, []byte("r"), time.Hour), "Complete with a result and another key's token")
		wantLost(t, s.Release(ctx, forged), "Release with another key's token")
	}
	// The same key and token, in another scope, and the other way round.
	wantLost(t, other.Complete(ctx, claims[0], nil, time.Hour), "Complete in another scope")
	wantLost(t, other.Release(ctx, claims[0]), "Release in another scope")
	wantLost(t, s.Complete(ctx, oc, nil, time.Hour), "Complete of the other scope's claim")
	for i := range claims {
		wantState(t, s, fmt.Sprint("k", i), keystore.InProgress)
	}
	wantState(t, other, "k0", keystore.InProgress)
	for _, c := range claims {
		if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Complete(ctx, oc, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "k0", keystore.Done)
	wantState(t, other, "k0", keystore.Done)
}

// TestTokenAfterTakeover completes with the claim of an expired lease that
// another Reserve took over: refused, whether the new claim is in progress,
// completed or released, and the new one completes.
func TestTokenAfterTakeover(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t)
	for _, end := range []string{"in-progress", "complete", "release"} {
		key := "k-" + end
		old := acquire(t, s, key, time.Second)
		clk.add(time.Second)
		cur, err := s.Reserve(ctx, key, nil, time.Minute)
		if err != nil || cur.State != keystore.Acquired || !cur.Takeover || cur.Token <= old.Token {
			t.Fatalf("takeover: %+v %v", cur, err)
		}
		switch end {
		case "complete":
			if err := s.Complete(ctx, cur, nil, time.Hour); err != nil {
				t.Fatal(err)
			}
		case "release":
			if err := s.Release(ctx, cur); err != nil {
				t.Fatal(err)
			}
		}
		wantLost(t, s.Complete(ctx, old, nil, time.Hour), end+": Complete of the old claim")
		wantLost(t, s.Release(ctx, old), end+": Release of the old claim")
		switch end {
		case "in-progress":
			if err := s.Complete(ctx, cur, nil, time.Hour); err != nil {
				t.Fatal(err)
			}
			wantState(t, s, key, keystore.Done)
		case "complete":
			wantState(t, s, key, keystore.Done)
		case "release":
			if _, err := s.Inspect(ctx, key); !errors.Is(err, keystore.ErrNotFound) {
				t.Fatalf("released key: %v", err)
			}
		}
	}
	// A lapsed lease nobody took over still completes, as before.
	lapsed := acquire(t, s, "lapsed", time.Second)
	clk.add(time.Hour)
	if err := s.Complete(ctx, lapsed, nil, time.Hour); err != nil {
		t.Fatalf("Complete of a lapsed lease not taken over: %v", err)
	}
}

// TestTokenAcrossRestart uses claims from before a snapshot in the restored
// store (they still hold their keys), from a store that was not restored
// (they hold nothing), and claims taken over after the restore.
func TestTokenAcrossRestart(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t)
	claims := reserveNew(t, s, "k", 100, time.Minute)
	var buf bytes.Buffer
	if err := s.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	snap := buf.Bytes()
	r, err := memstore.Restore(bytes.NewReader(snap), memstore.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := newClocked(t)
	for i, c := range claims {
		wantLost(t, fresh.Complete(ctx, c, nil, time.Hour), "Complete in a store that never had the key")
		switch i % 3 {
		case 0:
			if err := r.Complete(ctx, c, nil, time.Hour); err != nil {
				t.Fatalf("Complete of a claim from before the snapshot: %v", err)
			}
			if err := r.Complete(ctx, c, nil, time.Hour); err != nil {
				t.Fatalf("Complete again: %v", err)
			}
		case 1:
			if err := r.Release(ctx, c); err != nil {
				t.Fatalf("Release of a claim from before the snapshot: %v", err)
			}
			wantLost(t, r.Complete(ctx, c, nil, time.Hour), "Complete after Release")
		}
	}
	// The rest are taken over in the restored store once their leases end:
	// the old claims are refused, the new ones, with higher tokens, complete.
	clk.add(time.Minute)
	for i := 2; i < len(claims); i += 3 {
		c := claims[i]
		n, err := r.Reserve(ctx, c.Key, nil, time.Minute)
		if err != nil || n.State != keystore.Acquired || !n.Takeover || n.Token <= c.Token {
			t.Fatalf("takeover after restore: %+v %v (old token %d)", n, err, c.Token)
		}
		wantLost(t, r.Complete(ctx, c, nil, time.Hour), "Complete of a claim taken over after the restore")
		if err := r.Complete(ctx, n, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// A second restore of the same snapshot: the claims made in the first
	// restored store are foreign to it.
	r2, err := memstore.Restore(bytes.NewReader(snap), memstore.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Reserve(ctx, "new-after-restore", nil, time.Minute)
	if err != nil || n.State != keystore.Acquired {
		t.Fatal(n, err)
	}
	wantLost(t, r2.Complete(ctx, n, nil, time.Hour), "Complete of another restored store's claim")
}

// TestTokensStepByShard checks that a key's tokens strictly increase over
// many claims, each a multiple of 64 (the shard count) above the last, as
// the lookup by token needs.
func TestTokensStepByShard(t *testing.T) {
	ctx := context.Background()
	s := dbtest.MemStore(t)
	last := map[string]uint64{}
	for round := range 50 {
		for i := range 40 {
			key := fmt.Sprint("k", i)
			c := acquire(t, s, key, time.Minute)
			if c.Token <= last[key] {
				t.Fatalf("round %d: %s token %d after %d", round, key, c.Token, last[key])
			}
			if prev := last[key]; prev != 0 && (c.Token-prev)%64 != 0 {
				t.Fatalf("%s: tokens %d and %d from different shards", key, prev, c.Token)
			}
			last[key] = c.Token
			if err := s.Release(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestConcurrentOneKey has many goroutines reserve one key, complete or
// release it, and replay stale claims, at once: at most one holds it at a
// time, tokens strictly increase, every stale claim is refused, and once
// completed it stays done.
func TestConcurrentOneKey(t *testing.T) {
	ctx := context.Background()
	s := dbtest.MemStore(t)
	const workers, rounds = 8, 400
	var (
		holders   atomic.Int32
		mu        sync.Mutex
		lastTok   uint64
		stale     []keystore.Claim
		done      atomic.Bool
		completed atomic.Bool
		wg        sync.WaitGroup
		failures  = make(chan error, workers)
	)
	fail := func(err error) {
		select {
		case failures <- err:
		default:
		}
	}
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				// Whether some Reserve saw the key done before this one
				// began: read first, since a Reserve that returns in
				// progress may have been answered before the Complete, and
				// another worker's Done can land between its return and a
				// check made after it.
				completedBefore := done.Load()
				c, err := s.Reserve(ctx, "one", nil, time.Minute)
				if err != nil {
					fail(err)
					return
				}
				if c.State == keystore.Done {
					done.Store(true)
				} else if completedBefore {
					fail(fmt.Errorf("state %v after the key completed", c.State))
					return
				}
				if c.State != keystore.Acquired {
					mu.Lock()
					old := stale
					mu.Unlock()
					if len(old) > 0 {
						if err := s.Complete(ctx, old[r%len(old)], nil, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
							fail(fmt.Errorf("stale Complete: %v", err))
						}
					}
					continue
				}
				if n := holders.Add(1); n != 1 {
					fail(fmt.Errorf("%d holders at once", n))
				}
				mu.Lock()
				if c.Token <= lastTok {
					fail(fmt.Errorf("token %d after %d", c.Token, lastTok))
				}
				lastTok = c.Token
				mu.Unlock()
				holders.Add(-1)
				if w == 0 && r >= rounds/2 {
					if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
						fail(err)
					}
					completed.Store(true)
					continue
				}
				if err := s.Release(ctx, c); err != nil {
					fail(err)
				}
				mu.Lock()
				stale = append(stale, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatal(err)
	}
	if !completed.Load() { // worker 0 never held it in the second half
		c := acquire(t, s, "one", time.Minute)
		if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	wantState(t, s, "one", keystore.Done)
	for _, c := range stale {
		wantLost(t, s.Complete(ctx, c, nil, time.Hour), "stale Complete after the end")
	}
}

// TestPendingGrowShrink puts many keys in progress at once (the pending
// tables grow), ends them in an interleaved order by Complete, Release,
// expiry and Sweep (they shrink, keys moving back over deleted slots), and
// checks every key's state through it all.
func TestPendingGrowShrink(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t)
	const n = 20_000
	claims := make([]keystore.Claim, n)
	for i := range n {
		lease := time.Hour
		if i%4 == 3 {
			lease = time.Second // these expire
		}
		claims[i] = acquire(t, s, fmt.Sprint("k", i), lease)
	}
	for i := 0; i < n; i += 4 {
		if err := s.Complete(ctx, claims[i], nil, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, claims[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(2 * time.Second)
	if _, err := s.Sweep(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Len(), n/2; got != want {
		t.Fatalf("Len %d, want %d (done and still in progress)", got, want)
	}
	listed, after := 0, ""
	for {
		page, next, err := s.List(ctx, keystore.ListOptions{State: keystore.InProgress, After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		listed += len(page)
		if after = next; next == "" {
			break
		}
	}
	if listed != n/4 {
		t.Fatalf("List in progress: %d keys, want %d", listed, n/4)
	}
	for i, c := range claims {
		switch i % 4 {
		case 0:
			wantState(t, s, c.Key, keystore.Done)
		case 1:
			wantLost(t, s.Complete(ctx, c, nil, time.Hour), "Complete after Release")
		case 2:
			if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
				t.Fatalf("Complete of %s after the others went: %v", c.Key, err)
			}
		case 3:
			wantLost(t, s.Complete(ctx, c, nil, time.Hour), "Complete after the lease expired and was swept")
		}
	}
	if got, want := s.Len(), n/2; got != want {
		t.Fatalf("Len %d at the end, want %d", got, want)
	}
}

// TestReserveCompleteAllocs checks that a Reserve and an empty Complete of
// a new key allocate nothing that stays: no allocation for a key of any
// shape but the one 16-byte block compact.Hasher's AES path uses, the
// pending table's slots being reused.
func TestReserveCompleteAllocs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		format string
		max    float64
	}{{"%08x-1111-4111-8111-%012x", 1}, {"order-%d-%d", 0}} {
		s := dbtest.MemStore(t)
		keys := make([]string, 3000)
		for i := range keys {
			keys[i] = fmt.Sprintf(tc.format, i, i)
		}
		i := 0
		got := testing.AllocsPerRun(len(keys)-1, func() {
			c, err := s.Reserve(ctx, keys[i], nil, time.Minute)
			i++
			if err != nil || c.State != keystore.Acquired {
				t.Fatal(c, err)
			}
			if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
				t.Fatal(err)
			}
		})
		if got > tc.max {
			t.Errorf("keys like %q: %v allocations a Reserve and Complete, want at most %v", tc.format, got, tc.max)
		}
	}
}
