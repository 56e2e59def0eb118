package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// TestCompactDoneKeys walks a key completed with an empty result (the
// compact tier) through every call: replay with the exact expiry, a
// retried Complete, stale and forged tokens, Release, expiry to the
// nanosecond, and a new claim with a higher token.
func TestCompactDoneKeys(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t)
	c := acquire(t, s, "k", time.Minute)
	if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	end := clk.now().Add(time.Hour)
	d, err := s.Reserve(ctx, "k", []byte("any-fp"), time.Minute)
	if err != nil || d.State != keystore.Done || !d.Expires.Equal(end) || d.Result == nil || len(d.Result) != 0 {
		t.Fatalf("replay: %+v %v, want done, empty result, expiring %v", d, err, end)
	}
	if err := s.Complete(ctx, c, []byte("other"), time.Hour); err != nil {
		t.Fatalf("retried Complete of the same claim: %v", err)
	}
	for _, tok := range []uint64{c.Token + 1, c.Token + 2, c.Token + 1<<40} {
		forged := c
		forged.Token = tok
		if err := s.Complete(ctx, forged, nil, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Fatalf("Complete with token %d: %v, want ErrLeaseLost", tok, err)
		}
	}
	if err := s.Release(ctx, c); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("Release of a completed key: %v", err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len %d, want 1", s.Len())
	}
	clk.add(time.Hour - 1)
	if d, _ := s.Reserve(ctx, "k", nil, time.Minute); d.State != keystore.Done {
		t.Fatalf("1 ns before the TTL ends: %+v", d)
	}
	clk.add(1)
	n, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || n.State != keystore.Acquired || n.Takeover || n.Token <= c.Token {
		t.Fatalf("at the TTL end: %+v %v", n, err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len %d after expiry and a new claim, want 1", s.Len())
	}
	if err := s.Complete(ctx, c, nil, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("the first claim's Complete after a new claim: %v", err)
	}
}

// TestCompactFullReclaims checks that expired compact keys free their
// slots when the store is full, and live ones are never evicted.
func TestCompactFullReclaims(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t, memstore.WithMaxKeys(200))
	for i, c := range reserveNew(t, s, "a", 200, time.Minute) {
		ttl := time.Second
		if i%2 == 1 {
			ttl = time.Hour
		}
		if err := s.Complete(ctx, c, nil, ttl); err != nil {
			t.Fatal(err)
		}
	}
	wantFull(t, s, "b", "full")
	clk.add(2 * time.Second)
	reserveNew(t, s, "b", 100, time.Minute) // the 100 expired keys' slots
	wantFull(t, s, "c", "full again")
	for i := 1; i < 200; i += 2 {
		if d, _ := s.Reserve(ctx, fmt.Sprint("a", i), nil, time.Minute); d.State != keystore.Done {
			t.Fatalf("live key a%d: %+v", i, d)
		}
	}
}

type modelKey struct {
	state  keystore.State // 0 absent
	token  uint64
	exp    time.Time
	result string
}

// TestStoreMatchesModel runs random Reserve, Complete (empty or not, with
// random TTLs, so keys go to the compact tier and to the map), Release,
// clock moves and restarts against a plain map, checking states, results,
// expiries and errors. A restart is graceful (a snapshot taken now,
// restored) or a crash (the process dies and the store is restored from
// the last snapshot, or from none): the model goes back to that
// snapshot's state, and every token handed out after a restart must be
// above every token handed out before it, in any shard. Keys live in two
// scopes.
func TestStoreMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		clk := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
		opts := []memstore.Option{memstore.WithClock(clk.now)}
		root, err := memstore.New(opts...)
		if err != nil {
			rt.Fatal(err)
		}
		var scoped keystore.Store
		views := func() {
			if scoped, err = root.Scope("tenant"); err != nil {
				rt.Fatal(err)
			}
		}
		views()
		model := map[string]*modelKey{}
		claims := map[string][]keystore.Claim{}
		var saved []byte                   // the last snapshot; nil: none
		var savedModel map[string]modelKey // the model when it was taken
		var maxToken, floor uint64         // tokens handed out; the largest before the last restart
		live := func(m *modelKey) bool { return m != nil && m.state != 0 && clk.now().Before(m.exp) }
		copyModel := func() map[string]modelKey {
			c := map[string]modelKey{}
			for k, m := range model {
				c[k] = *m
			}
			return c
		}
		for range rapid.IntRange(1, 200).Draw(rt, "ops") {
			key := fmt.Sprint("k", rapid.IntRange(0, 5).Draw(rt, "key"))
			s := keystore.Store(root)
			if rapid.Bool().Draw(rt, "scoped") {
				s, key = scoped, "t/"+key // the model names scoped keys apart
			}
			name := strings.TrimPrefix(key, "t/")
			m := model[key]
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 5:
				var buf bytes.Buffer
				if err := root.WriteSnapshot(&buf); err != nil {
					rt.Fatal(err)
				}
				saved, savedModel = buf.Bytes(), copyModel()
				continue
			case 6:
				if rapid.Bool().Draw(rt, "graceful") {
					var buf bytes.Buffer
					if err := root.WriteSnapshot(&buf); err != nil {
						rt.Fatal(err)
					}
					saved, savedModel = buf.Bytes(), copyModel()
				}
				// A restart takes at least a microsecond.
				clk.add(time.Duration(rapid.IntRange(1000, 5_000_000).Draw(rt, "restart ns")))
				if err := root.Close(); err != nil {
					rt.Fatal(err)
				}
				model = map[string]*modelKey{}
				if saved == nil {
					root, err = memstore.New(opts...)
				} else {
					root, err = memstore.Restore(bytes.NewReader(saved), opts...)
					for k, m := range savedModel {
						model[k] = &m
					}
				}
				if err != nil {
					rt.Fatal(err)
				}
				views()
				floor = maxToken
				continue
			case 0:
				clk.add(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "ms")) * time.Millisecond)
			case 1, 2:
				lease := time.Duration(rapid.IntRange(1, 2000).Draw(rt, "lease")) * time.Millisecond
				c, err := s.Reserve(ctx, name, nil, lease)
				if err != nil {
					rt.Fatal(err)
				}
				switch {
				case live(m) && m.state == keystore.InProgress:
					if c.State != keystore.InProgress || !c.Expires.Equal(m.exp) {
						rt.Fatalf("Reserve %s: %+v, want in progress until %v", key, c, m.exp)
					}
				case live(m):
					if c.State != keystore.Done || string(c.Result) != m.result || !c.Expires.Equal(m.exp) {
						rt.Fatalf("Reserve %s: %+v, want done %q until %v", key, c, m.result, m.exp)
					}
				default:
					if c.State != keystore.Acquired || (m != nil && c.Token <= m.token) || c.Token <= floor {
						rt.Fatalf("Reserve %s: %+v, want acquired above token %v and %d", key, c, m, floor)
					}
					maxToken = max(maxToken, c.Token)
					model[key] = &modelKey{state: keystore.InProgress, token: c.Token, exp: clk.now().Add(lease)}
					claims[key] = append(claims[key], c)
				}
			case 3:
				cs := claims[key]
				if len(cs) == 0 {
					continue
				}
				c := cs[rapid.IntRange(0, len(cs)-1).Draw(rt, "claim")]
				result := rapid.SampledFrom([]string{"", "", "r"}).Draw(rt, "result")
				ttl := time.Duration(rapid.IntRange(1, 3000).Draw(rt, "ttl")) * time.Millisecond
				err := s.Complete(ctx, c, []byte(result), ttl)
				switch {
				case m != nil && m.token == c.Token && m.state == keystore.InProgress:
					// The holder completes; after its lease, if nobody took
					// over, it may or may not (the expired lease may have
					// been reclaimed).
					switch {
					case err == nil:
						m.state, m.result, m.exp = keystore.Done, result, clk.now().Add(ttl)
					case !live(m) && errors.Is(err, keystore.ErrLeaseLost):
						m.state = 0
					default:
						rt.Fatalf("Complete %s by the holder: %v", key, err)
					}
				case m != nil && m.token == c.Token && m.state == keystore.Done && live(m):
					if err != nil {
						rt.Fatalf("retried Complete %s: %v", key, err)
					}
				case m != nil && m.token == c.Token && m.state == keystore.Done:
					// Expired but maybe not reclaimed: either answer is allowed.
				default:
					if !errors.Is(err, keystore.ErrLeaseLost) {
						rt.Fatalf("stale Complete %s: %v, want ErrLeaseLost", key, err)
					}
				}
			case 4:
				cs := claims[key]
				if len(cs) == 0 {
					continue
				}
				c := cs[len(cs)-1]
				err := s.Release(ctx, c)
				if m != nil && m.token == c.Token && m.state == keystore.InProgress {
					if err != nil && (live(m) || !errors.Is(err, keystore.ErrLeaseLost)) {
						rt.Fatalf("Release %s by the holder: %v", key, err)
					}
					m.state = 0
				} else if !errors.Is(err, keystore.ErrLeaseLost) {
					rt.Fatalf("stale Release %s: %v, want ErrLeaseLost", key, err)
				}
			}
		}
	})
}
