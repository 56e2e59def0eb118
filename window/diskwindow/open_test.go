package diskwindow

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestOpenReplay times Open on a journal of IDEM_REPLAY_IDS ids (default
// 200k): the open generation is rebuilt from it.
func TestOpenReplay(t *testing.T) {
	t.Parallel()
	n := 200_000
	dir := t.TempDir()
	s := mustOpen(t, dir, time.Hour)
	r := rand.New(rand.NewPCG(8, 9))
	ids := uuids(r, n)
	for i := 0; i < n; i += 4096 {
		if _, err := s.AddBatch(context.Background(), "", ids[i:min(i+4096, n)], t0, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	start := time.Now()
	s = mustOpen(t, dir, time.Hour)
	defer s.Close()
	t.Logf("Open replayed %d ids in %v", s.Stats().OpenIDs, time.Since(start))
	if got := s.Stats().OpenIDs; got != n {
		t.Fatalf("%d ids after replay, want %d", got, n)
	}
	dups, err := s.AddBatch(context.Background(), "", ids[:1000], t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range dups {
		if !d {
			t.Fatalf("id %d forgotten by the replay", i)
		}
	}
}

// TestOpenLocked: a directory open in one Set is refused to a second, with
// ErrLocked and a message that says what to do, until the first closes.
// (A process killed with the directory open releases it: TestKill9 reopens
// after SIGKILL.)
func TestOpenLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir, time.Hour)
	if _, err := s.Add(context.Background(), "", "order-1", t0); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, time.Hour)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "directory of its own") {
		t.Fatalf("second Open: %v, want ErrLocked saying what to do", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, time.Hour)
	defer s.Close()
	if dup, err := s.Add(context.Background(), "", "order-1", t0); err != nil || !dup {
		t.Fatalf("after reopening: dup %v, %v", dup, err)
	}
}
