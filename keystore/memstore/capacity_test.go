package memstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-go/idem"
)

// doneBytes sums the compact tier's bytes over the shards, and its growth
// bytes (the old indexes of growths under way).
func doneBytes(s *Store) (all, growing int) {
	for i := range s.c.shards {
		sh := &s.c.shards[i]
		sh.mu.Lock()
		if sh.done != nil {
			all += sh.done.Bytes()
			growing += sh.done.GrowthBytes()
		}
		sh.mu.Unlock()
	}
	return all, growing
}

// TestWithCapacity: a store sized for n compact-tier keys completes n of
// them without any shard's index growing, holds those indexes when the
// keys expire and after a snapshot load, and refuses a bad capacity.
func TestWithCapacity(t *testing.T) {
	t.Parallel()
	if _, err := New(WithCapacity(0)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("WithCapacity(0): %v", err)
	}
	ctx := context.Background()
	const n = 320_000 // 5,000 a shard: five chunks of records each, nearly full
	now := time.Unix(1_700_000_000, 0)
	s, err := New(WithCapacity(n), WithMaxKeys(2*n), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	floor, _ := doneBytes(s)
	if floor < n*5 {
		t.Fatalf("sized for %d keys, the compact tier holds %d bytes", n, floor)
	}
	for i := range n {
		c, err := s.Reserve(ctx, fmt.Sprintf("key-%06d", i), nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			if _, g := doneBytes(s); g != 0 {
				t.Fatalf("key %d: an index grew (%d bytes of old index)", i, g)
			}
		}
	}
	if b, _ := doneBytes(s); b > 23*n {
		t.Fatalf("%d keys in %d bytes", n, b)
	}
	path := filepath.Join(t.TempDir(), "m.snap")
	if err := s.SaveSnapshot(path); err != nil {
		t.Fatal(err)
	}
	r, err := Load(path, WithCapacity(n), WithMaxKeys(2*n), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := r.Reserve(ctx, "key-000042", nil, time.Minute); err != nil || c.State.String() != "done" {
		t.Fatalf("restored key-000042: %+v, %v", c, err)
	}
	if b, _ := doneBytes(r); b < floor {
		t.Fatalf("restored: %d bytes, floor %d", b, floor)
	}
	// Every key expires: the indexes stay.
	now = now.Add(2 * time.Hour)
	if _, err := s.Sweep(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	if b, _ := doneBytes(s); s.Len() != 0 || b < floor-numShards*16<<10 {
		t.Fatalf("after expiry: %d keys in %d bytes, floor %d", s.Len(), b, floor)
	}
}
