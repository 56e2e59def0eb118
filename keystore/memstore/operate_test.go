package memstore_test

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

// tiers are the two ways a key lives in memstore: reserved without a
// request fingerprint it waits in the pending map and, completed with an
// empty result, goes to the compact tier; with one it lives in the exact
// map tier.
var tiers = []struct {
	name string
	fp   []byte
}{{"compact", nil}, {"exact", []byte("fp")}}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}

// TestExtendStaleAfterTakeover: the first holder's lease lapses, a second
// caller takes the key over; the first holder's Extend gets ErrLeaseLost
// and leaves the new lease as it was, in both tiers.
func TestExtendStaleAfterTakeover(t *testing.T) {
	ctx := context.Background()
	for _, tier := range tiers {
		t.Run(tier.name, func(t *testing.T) {
			s, clk := newClocked(t)
			old, err := s.Reserve(ctx, "k", tier.fp, time.Second)
			must(t, "Reserve", err)
			ext, err := s.Extend(ctx, old, time.Second)
			must(t, "Extend of a live lease", err)
			if !ext.Expires.Equal(clk.now().Add(time.Second)) || ext.Token != old.Token {
				t.Fatalf("Extend: %+v", ext)
			}
			clk.add(time.Second)
			// Lapsed but not taken over: Extend may still renew it.
			_, err = s.Extend(ctx, old, time.Second)
			must(t, "Extend of a lapsed lease nobody took", err)
			clk.add(time.Second)
			cur, err := s.Reserve(ctx, "k", tier.fp, time.Minute)
			if err != nil || cur.State != keystore.Acquired || !cur.Takeover || cur.Token <= old.Token {
				t.Fatalf("takeover: %+v %v", cur, err)
			}
			_, err = s.Extend(ctx, old, time.Hour)
			mustIs(t, "Extend with the stale token", err, keystore.ErrLeaseLost)
			info, err := s.Inspect(ctx, "k")
			must(t, "Inspect", err)
			if info.Token != cur.Token || !info.Expires.Equal(cur.Expires) {
				t.Fatalf("after a stale Extend: %+v, want the new holder's lease %+v untouched", info, cur)
			}
			mustIs(t, "Complete with the stale token", s.Complete(ctx, old, nil, time.Hour), keystore.ErrLeaseLost)
			must(t, "Complete", s.Complete(ctx, cur, nil, time.Hour))
			_, err = s.Extend(ctx, cur, time.Hour)
			mustIs(t, "Extend after Complete", err, keystore.ErrLeaseLost)
			forged := cur
			forged.Token++
			_, err = s.Extend(ctx, forged, time.Hour)
			mustIs(t, "Extend with a forged token", err, keystore.ErrLeaseLost)
		})
	}
}

// TestExtendRacesExpiry renews a short lease in one goroutine while
// another moves the clock and tries to take the key over: a takeover never
// happens while a lease a returned Extend granted is live, and once the
// key is taken over no Extend with the old token succeeds.
func TestExtendRacesExpiry(t *testing.T) {
	ctx := context.Background()
	for _, tier := range tiers {
		t.Run(tier.name, func(t *testing.T) {
			s, clk := newClocked(t)
			const lease = 10 * time.Millisecond
			for round := range 200 {
				key := fmt.Sprint("race-", round)
				c, err := s.Reserve(ctx, key, tier.fp, lease)
				must(t, "Reserve", err)
				var granted atomic.Int64 // latest lease end a returned Extend gave, ns
				granted.Store(c.Expires.UnixNano())
				var taken atomic.Bool
				var wg sync.WaitGroup
				wg.Go(func() {
					for range 50 {
						wasTaken := taken.Load()
						nc, err := s.Extend(ctx, c, lease)
						switch {
						case err == nil && wasTaken:
							t.Errorf("%s: Extend succeeded after the key was taken over", key)
							return
						case err == nil:
							for {
								g := granted.Load()
								if nc.Expires.UnixNano() <= g || granted.CompareAndSwap(g, nc.Expires.UnixNano()) {
									break
								}
							}
						case errors.Is(err, keystore.ErrLeaseLost):
							return
						default:
							t.Errorf("%s: Extend: %v", key, err)
							return
						}
					}
				})
				wg.Go(func() {
					for range 50 {
						clk.add(lease / 4)
						before := granted.Load()
						now := clk.now()
						n, err := s.Reserve(ctx, key, tier.fp, time.Minute)
						if err != nil {
							t.Errorf("%s: Reserve: %v", key, err)
							return
						}
						if n.State == keystore.Acquired {
							taken.Store(true)
							if before > now.UnixNano() {
								t.Errorf("%s: taken over at %v while a renewed lease ran to %v", key, now, time.Unix(0, before))
							}
							return
						}
					}
				})
				wg.Wait()
			}
		})
	}
}

// TestInspectStates inspects a key in each state and tier, and checks
// that inspecting changes nothing (a lapsed lease is not taken over).
func TestInspectStates(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t)
	notFound := func(key, when string) {
		t.Helper()
		_, err := s.Inspect(ctx, key)
		mustIs(t, "Inspect "+when, err, keystore.ErrNotFound)
	}
	want := func(key string, st keystore.State, token uint64, exp time.Time, fp string, result string) {
		t.Helper()
		info, err := s.Inspect(ctx, key)
		must(t, "Inspect "+key, err)
		if info.Key != key || info.State != st || info.Token != token || !info.Expires.Equal(exp) || info.Fingerprint != fp ||
			info.ResultSize != len(result) || (st == keystore.Done && (info.Result == nil || string(info.Result) != result)) {
			t.Fatalf("Inspect %s: %+v, want %v token %d expires %v fp %q result %q", key, info, st, token, exp, fp, result)
		}
	}
	notFound("absent", "of a key never reserved")

	pend := acquire(t, s, "pending", time.Minute)
	want("pending", keystore.InProgress, pend.Token, pend.Expires, "", "")
	exact, err := s.Reserve(ctx, "exact", []byte{0xab}, time.Minute)
	must(t, "Reserve", err)
	want("exact", keystore.InProgress, exact.Token, exact.Expires, "ab", "")

	ext, err := s.Extend(ctx, pend, time.Hour)
	must(t, "Extend", err)
	want("pending", keystore.InProgress, pend.Token, ext.Expires, "", "")

	compactDone := acquire(t, s, "compact-done", time.Minute)
	must(t, "Complete", s.Complete(ctx, compactDone, nil, 2*time.Hour))
	want("compact-done", keystore.Done, compactDone.Token, clk.now().Add(2*time.Hour), "", "")
	must(t, "Complete", s.Complete(ctx, exact, []byte("res"), 2*time.Hour))
	want("exact", keystore.Done, exact.Token, clk.now().Add(2*time.Hour), "ab", "res")

	released := acquire(t, s, "released", time.Minute)
	must(t, "Release", s.Release(ctx, released))
	notFound("released", "of a released key")

	// Lapsed, in both tiers: still shown, with the holder's token, and not
	// taken over by Inspect.
	lapsedP := acquire(t, s, "lapsed-p", time.Second)
	lapsedE, err := s.Reserve(ctx, "lapsed-e", []byte{1}, time.Second)
	must(t, "Reserve", err)
	clk.add(time.Second)
	for _, c := range []keystore.Claim{lapsedP, lapsedE} {
		info, err := s.Inspect(ctx, c.Key)
		must(t, "Inspect lapsed", err)
		if !info.Lapsed(clk.now()) || info.Token != c.Token {
			t.Fatalf("Inspect of lapsed %s: %+v", c.Key, info)
		}
		must(t, "Complete of a lapsed lease nobody took", s.Complete(ctx, c, nil, time.Minute))
	}

	clk.add(2 * time.Hour)
	notFound("compact-done", "after the result expired (compact tier)")
	notFound("exact", "after the result expired (exact tier)")
	want("pending", keystore.InProgress, pend.Token, ext.Expires, "", "") // lapsed, not taken over

	scoped, err := s.Scope("other")
	must(t, "Scope", err)
	_, err = scoped.(keystore.Inspector).Inspect(ctx, "pending")
	mustIs(t, "Inspect in another scope", err, keystore.ErrNotFound)
	keys, _, err := scoped.(keystore.Inspector).List(ctx, keystore.ListOptions{})
	if err != nil || len(keys) != 0 {
		t.Fatalf("List in an empty scope: %v %v", keys, err)
	}
}

// TestForget forgets done keys in both tiers, refuses in-progress ones and
// absent ones, and checks that a forgotten compact-tier key is reserved
// again with a higher token, completes (into the map tier, since its old
// record stays in the compact tier until it expires) and is forgotten
// again, and that the old record is reclaimed when it expires.
func TestForget(t *testing.T) {
	ctx := context.Background()
	for _, tier := range tiers {
		t.Run(tier.name, func(t *testing.T) {
			s, clk := newClocked(t)
			mustIs(t, "Forget of a missing key", s.Forget(ctx, "k"), keystore.ErrNotFound)
			c, err := s.Reserve(ctx, "k", tier.fp, time.Second)
			must(t, "Reserve", err)
			mustIs(t, "Forget of a held key", s.Forget(ctx, "k"), keystore.ErrInProgress)
			clk.add(time.Second)
			mustIs(t, "Forget of a lapsed lease", s.Forget(ctx, "k"), keystore.ErrInProgress)
			must(t, "Complete", s.Complete(ctx, c, nil, time.Hour))
			must(t, "Forget", s.Forget(ctx, "k"))
			mustIs(t, "Forget again", s.Forget(ctx, "k"), keystore.ErrNotFound)
			_, err = s.Inspect(ctx, "k")
			mustIs(t, "Inspect of a forgotten key", err, keystore.ErrNotFound)
			mustIs(t, "Complete of the forgotten claim", s.Complete(ctx, c, nil, time.Hour), keystore.ErrLeaseLost)

			n, err := s.Reserve(ctx, "k", tier.fp, time.Minute)
			if err != nil || n.State != keystore.Acquired || n.Takeover || n.Token <= c.Token {
				t.Fatalf("Reserve after Forget: %+v %v", n, err)
			}
			must(t, "Complete", s.Complete(ctx, n, nil, 2*time.Hour))
			d, err := s.Reserve(ctx, "k", nil, time.Minute)
			if err != nil || d.State != keystore.Done {
				t.Fatalf("after the second Complete: %+v %v", d, err)
			}
			clk.add(time.Hour) // the forgotten record expires
			if d, _ := s.Reserve(ctx, "k", nil, time.Minute); d.State != keystore.Done {
				t.Fatalf("the second result lost when the forgotten one expired: %+v", d)
			}
			if _, err := s.Sweep(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if s.Len() != 1 {
				t.Fatalf("Len %d, want 1 (the forgotten record reclaimed)", s.Len())
			}
			must(t, "Forget of the second result", s.Forget(ctx, "k"))
			if s.Len() != 0 {
				t.Fatalf("Len %d after Forget, want 0", s.Len())
			}
			clk.add(2 * time.Hour)
			if _, err := s.Sweep(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if s.Len() != 0 {
				t.Fatalf("Len %d after everything expired, want 0", s.Len())
			}
			mustIs(t, "Forget of an expired key", s.Forget(ctx, "k"), keystore.ErrNotFound)
		})
	}
}

// TestListTiers pages through keys of every tier: in-progress keys of
// both tiers and done keys of the map tier are listed once each in key
// order; done keys of the compact tier are not (their names are not kept).
func TestListTiers(t *testing.T) {
	ctx := context.Background()
	s, _ := newClocked(t)
	var wantKeys []string
	for i := range 30 {
		key := fmt.Sprintf("k%02d", i)
		var fp []byte
		if i%2 == 1 {
			fp = []byte{byte(i)}
		}
		c, err := s.Reserve(ctx, key, fp, time.Minute)
		must(t, "Reserve", err)
		switch i % 3 {
		case 0: // in progress
			wantKeys = append(wantKeys, key)
		case 1: // done with a result: map tier
			must(t, "Complete", s.Complete(ctx, c, []byte("r"), time.Hour))
			wantKeys = append(wantKeys, key)
		case 2:
			must(t, "Complete", s.Complete(ctx, c, nil, time.Hour))
			if fp != nil {
				wantKeys = append(wantKeys, key) // a fingerprint keeps it in the map tier
			}
		}
	}
	var got []string
	after := ""
	for {
		keys, next, err := s.List(ctx, keystore.ListOptions{After: after, Limit: 4})
		must(t, "List", err)
		for _, k := range keys {
			got = append(got, k.Key)
		}
		if next == "" {
			break
		}
		after = next
	}
	if fmt.Sprint(got) != fmt.Sprint(wantKeys) {
		t.Fatalf("List: %v, want %v", got, wantKeys)
	}
	must(t, "Close", s.Close())
	_, _, err := s.List(ctx, keystore.ListOptions{})
	if err == nil {
		t.Fatal("List after Close: no error")
	}
	_, err = s.Extend(ctx, keystore.Claim{Key: "k00", State: keystore.Acquired, Token: 1}, time.Minute)
	if err == nil {
		t.Fatal("Extend after Close: no error")
	}
}
