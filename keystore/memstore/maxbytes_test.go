package memstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

// TestWithMaxBytes: past the byte budget a Complete is refused with
// ErrResultTooLarge naming the budget, the key stays in progress, small
// results still complete, and expired results give their bytes back.
func TestWithMaxBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	s, err := New(WithMaxBytes(10_000), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	complete := func(key string, n int) error {
		t.Helper()
		c, err := s.Reserve(ctx, key, []byte("fp"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Complete(ctx, c, make([]byte, n), time.Hour)
		if err != nil {
			if again, rerr := s.Reserve(ctx, key, []byte("fp"), time.Minute); rerr != nil || again.State != keystore.InProgress {
				t.Fatalf("%s after a refused Complete: %+v %v, want it still in progress", key, again, rerr)
			}
		}
		return err
	}
	for i := range 2 {
		if err := complete(fmt.Sprint("big-", i), 4000); err != nil {
			t.Fatalf("big-%d: %v", i, err)
		}
	}
	err = complete("big-2", 4000)
	if !errors.Is(err, keystore.ErrResultTooLarge) || !strings.Contains(err.Error(), "WithMaxBytes") {
		t.Fatalf("past the budget: %v, want ErrResultTooLarge naming WithMaxBytes", err)
	}
	for i := range 50 { // small results are bounded by WithMaxKeys, not refused
		if err := complete(fmt.Sprint("small-", i), SmallResult); err != nil {
			t.Fatalf("small-%d: %v", i, err)
		}
	}
	if held := s.c.heldBytes(); held < 8000 || held > 10_000+50*(SmallResult+2) {
		t.Fatalf("held %d bytes", held)
	}
	// A restored store counts what it restored.
	path := t.TempDir() + "/m.snap"
	if err := s.SaveSnapshot(path); err != nil {
		t.Fatal(err)
	}
	r, err := Load(path, WithMaxBytes(10_000), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.c.heldBytes(), s.c.heldBytes(); got != want {
		t.Fatalf("restored: %d bytes held, want %d", got, want)
	}
	r.Close()
	now = now.Add(2 * time.Hour)
	if _, err := s.Sweep(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	if held := s.c.heldBytes(); held != 0 {
		t.Fatalf("after every result and lease expired: %d bytes held", held)
	}
	if err := complete("big-3", 4000); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if _, err := New(WithMaxBytes(0)); err == nil {
		t.Fatal("WithMaxBytes(0) accepted")
	}
}
