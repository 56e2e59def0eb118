package diskwindow

import (
	"context"
	"slices"
	"testing"
	"time"
)

// SeenBatch answers without recording: from the open generation, from
// sealed files, across a restart, and not past the horizon.
func TestSeenBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, time.Hour)
	seen := func(ids ...string) []bool {
		t.Helper()
		got, err := s.SeenBatch(ctx, "orders", ids, t0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := seen("a", "b", "a"); !slices.Equal(got, []bool{false, false, false}) {
		t.Fatalf("fresh set: %v", got)
	}
	if n := s.Stats().OpenIDs; n != 0 {
		t.Fatalf("SeenBatch recorded %d ids", n)
	}
	if _, err := s.AddBatch(ctx, "orders", []string{"a"}, t0, nil); err != nil {
		t.Fatal(err)
	}
	if got := seen("a", "b"); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("after adding a: %v", got)
	}
	if got, _ := s.SeenBatch(ctx, "other scope", []string{"a"}, t0, nil); got[0] {
		t.Fatal("a seen in another scope")
	}
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	if got := seen("a", "b"); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("after sealing: %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, time.Hour)
	defer s.Close()
	if got := seen("a", "b"); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("after reopening: %v", got)
	}
	if got, err := s.SeenBatch(ctx, "orders", []string{"a"}, t0.Add(2*time.Hour), nil); err != nil || got[0] {
		t.Fatalf("past the horizon: %v %v", got, err)
	}
	s.Close()
	if _, err := s.SeenBatch(ctx, "orders", []string{"a"}, t0, nil); err == nil {
		t.Fatal("SeenBatch on a closed set succeeded")
	}
}
