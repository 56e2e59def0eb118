package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/storetest"
)

// The store starts no goroutine: none may be left when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store { return dbtest.MemStore(t) })
}

// clock is a hand-moved clock for tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newClocked(t testing.TB, opts ...memstore.Option) (*memstore.Store, *clock) {
	t.Helper()
	clk := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := memstore.New(append([]memstore.Option{memstore.WithClock(clk.now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// reserveNew reserves the n new keys prefix0 … prefix(n-1) with lease and
// returns their claims.
func reserveNew(t *testing.T, s *memstore.Store, prefix string, n int, lease time.Duration) []keystore.Claim {
	t.Helper()
	claims := make([]keystore.Claim, 0, n)
	for i := range n {
		claims = append(claims, acquire(t, s, fmt.Sprint(prefix, i), lease))
	}
	return claims
}

// acquire reserves the new key with lease and returns its claim.
func acquire(t *testing.T, s *memstore.Store, key string, lease time.Duration) keystore.Claim {
	t.Helper()
	c, err := s.Reserve(context.Background(), key, nil, lease)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("new key %s: %+v %v", key, c, err)
	}
	return c
}

// wantFull checks that s refuses the new key with ErrFull.
func wantFull(t *testing.T, s *memstore.Store, key, when string) {
	t.Helper()
	if _, err := s.Reserve(context.Background(), key, nil, time.Minute); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("%s: Reserve(%q): %v, want ErrFull", when, key, err)
	}
}

func TestInjectedClock(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t)
	c := acquire(t, s, "k", time.Minute)
	if want := clk.now().Add(time.Minute); !c.Expires.Equal(want) {
		t.Fatalf("Expires %v, want %v", c.Expires, want)
	}
	clk.add(time.Minute - time.Nanosecond)
	if c2, _ := s.Reserve(ctx, "k", nil, time.Minute); c2.State != keystore.InProgress {
		t.Fatalf("1ns before the lease ends: %v", c2.State)
	}
	clk.add(time.Nanosecond)
	c3, _ := s.Reserve(ctx, "k", nil, time.Minute)
	if c3.State != keystore.Acquired || !c3.Takeover || c3.Token <= c.Token {
		t.Fatalf("at the lease end: %+v", c3)
	}
	if err := s.Complete(ctx, c3, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Hour - 1)
	if d, _ := s.Reserve(ctx, "k", nil, time.Minute); d.State != keystore.Done || !d.Expires.Equal(clk.now().Add(1)) {
		t.Fatalf("before the TTL ends: %+v", d)
	}
	clk.add(1)
	if a, _ := s.Reserve(ctx, "k", nil, time.Minute); a.State != keystore.Acquired || a.Takeover {
		t.Fatalf("after the TTL: %+v", a)
	}
}

func TestFullNeverEvictsLiveKeys(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t, memstore.WithMaxKeys(100))
	claims := reserveNew(t, s, "k", 100, time.Minute)
	_, err := s.Reserve(ctx, "one-too-many", nil, time.Minute)
	if !errors.Is(err, memstore.ErrFull) || !errors.Is(err, keystore.ErrFull) {
		t.Fatalf("Reserve beyond the limit: %v, want ErrFull", err)
	}
	// Existing keys still answer, and a Release frees a slot.
	if c, err := s.Reserve(ctx, "k7", nil, time.Minute); err != nil || c.State != keystore.InProgress {
		t.Fatalf("existing key when full: %+v %v", c, err)
	}
	if err := s.Release(ctx, claims[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, "one-too-many", nil, time.Minute); err != nil {
		t.Fatalf("after a Release: %v", err)
	}
	// Completed keys with a short TTL are reclaimed once expired, from any
	// shard, when the store is full.
	for _, c := range claims[1:51] {
		if err := s.Complete(ctx, c, nil, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	wantFull(t, s, "still-full", "before expiry")
	clk.add(2 * time.Second)
	reserveNew(t, s, "new", 50, time.Hour)
	wantFull(t, s, "beyond", "full again")
	if s.Len() != 100 {
		t.Fatalf("Len %d, want 100", s.Len())
	}
	// The live in-progress keys survived every reclaim.
	for _, c := range claims[51:] {
		if err := s.Complete(ctx, c, []byte("ok"), time.Hour); err != nil {
			t.Fatalf("live key %q was lost: %v", c.Key, err)
		}
	}
}

func TestExpiredKeysReclaimedWithoutFull(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(t)
	for i := range 10000 {
		if _, err := s.Reserve(ctx, fmt.Sprint("a", i), nil, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(time.Minute)
	// New inserts sample their shard and delete expired entries as they go.
	for i := range 10000 {
		if _, err := s.Reserve(ctx, fmt.Sprint("b", i), nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > 12000 {
		t.Fatalf("Len %d after 10000 expired and 10000 new keys: the sampled sweep does not keep up", n)
	}
	n, err := s.Sweep(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 10000 {
		t.Fatalf("Len %d after Sweep (deleted %d), want 10000", s.Len(), n)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []memstore.Option{memstore.WithMaxKeys(0), memstore.WithMaxResultSize(-1), memstore.WithClock(nil)} {
		if _, err := memstore.New(o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
	}
	s, err := memstore.New(memstore.WithMaxResultSize(4))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, _ := s.Reserve(ctx, "k", nil, time.Minute)
	if err := s.Complete(ctx, c, []byte("12345"), time.Minute); !errors.Is(err, keystore.ErrResultTooLarge) {
		t.Fatalf("5-byte result with a 4-byte limit: %v", err)
	}
	if err := s.Complete(ctx, c, []byte("1234"), time.Minute); err != nil {
		t.Fatal(err)
	}
}
