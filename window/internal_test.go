package window

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-go/idem"

	"pgregory.net/rapid"
)

// model is a plain statement of the window rules: a map of every id ever
// accepted with its latest first-accept time and sequence, no expiry
// structures at all.
type model struct {
	w      time.Duration
	max    int
	latest time.Time
	next   uint64
	ids    map[[2]string]modelID
}

type modelID struct {
	first time.Time
	seq   uint64
}

func (m *model) add(scope, id string, now time.Time) (bool, uint64, error) {
	if now.After(m.latest) {
		m.latest = now
	}
	now = m.latest
	if e, ok := m.ids[[2]string{scope, id}]; ok && now.Sub(e.first) < m.w {
		return true, e.seq, nil
	}
	if m.max > 0 {
		live := 0
		for _, e := range m.ids {
			if now.Sub(e.first) < m.w {
				live++
			}
		}
		if live >= m.max {
			return false, 0, ErrFull
		}
	}
	m.next++
	m.ids[[2]string{scope, id}] = modelID{first: now, seq: m.next}
	return false, m.next, nil
}

// TestDedupMatchesModel compares Dedup with the model on random streams:
// repeated ids, several scopes, clock jumps forward past the window and
// backward, a max-entries bound, Expire calls, and restarts: a snapshot
// written, read into a fresh Dedup (new key, new clock) that carries on.
// Long probe chains and collisions of home slots are exercised by
// internal/compact's own model test.
func TestDedupMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		win := time.Duration(rapid.IntRange(1, 100).Draw(t, "window"))
		maxEntries := rapid.IntRange(0, 20).Draw(t, "max")
		var opts []Option
		if maxEntries > 0 {
			opts = append(opts, WithMaxEntries(maxEntries))
		}
		d, err := New(win, opts...)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{w: win, max: maxEntries, next: 0, ids: map[[2]string]modelID{}}
		now := time.Unix(0, 1_000_000)
		for i := range rapid.IntRange(1, 300).Draw(t, "calls") {
			now = now.Add(time.Duration(rapid.IntRange(-20, 40).Draw(t, "tick")))
			switch rapid.IntRange(0, 20).Draw(t, "op") {
			case 0:
				d.Expire(now)
				if now.After(m.latest) {
					m.latest = now
				}
				continue
			case 1:
				var buf bytes.Buffer
				if err := d.WriteSnapshot(&buf); err != nil {
					t.Fatal(err)
				}
				if d, err = New(win, opts...); err != nil {
					t.Fatal(err)
				}
				if err := d.ReadSnapshot(&buf); err != nil {
					t.Fatalf("restart: %v", err)
				}
				continue
			}
			scope := rapid.SampledFrom([]string{"", "a", "ab"}).Draw(t, "scope")
			id := rapid.SampledFrom([]string{"", "b", "c", "bc", "x", "y", "z", "long-id-0123456789"}).Draw(t, "id")
			dup, orig, err := d.Add(scope, id, now)
			mdup, morig, merr := m.add(scope, id, now)
			if dup != mdup || orig != morig || !errors.Is(err, merr) || (err == nil) != (merr == nil) {
				t.Fatalf("call %d Add(%q, %q, %v) = (%v, %d, %v), model (%v, %d, %v)", i, scope, id, now.UnixNano(), dup, orig, err, mdup, morig, merr)
			}
		}
		live := 0
		for _, e := range m.ids {
			if m.latest.Sub(e.first) < win {
				live++
			}
		}
		if d.Expire(m.latest); d.Len() != live {
			t.Fatalf("Len %d, model has %d live ids", d.Len(), live)
		}
	})
}

// TestMemoryIsReleased checks that a burst's memory is given back once its
// ids expire, and that a live id costs at most 24 bytes, plus at most 6
// while the index grows (the old index, see internal/compact/grow.go).
func TestMemoryIsReleased(t *testing.T) {
	t.Parallel()
	d, err := New(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	const burst = 100_000
	for i := range burst {
		d.Seen("scope", fmt.Sprintf("id-%08d", i), t0)
	}
	if n, b, g := d.Len(), d.Bytes(), d.set.GrowthBytes(); n != burst || b-g > 24*burst || b > 30*burst {
		t.Fatalf("after the burst: %d ids in %d bytes (%d of them while growing)", n, b, g)
	}
	// A trickle after the window: the burst expires.
	for i := range 10 {
		d.Seen("scope", fmt.Sprintf("late-%d", i), t0.Add(time.Second+time.Duration(i)))
	}
	if n, b := d.Len(), d.Bytes(); n != 10 || b > 64<<10 {
		t.Fatalf("after expiry: %d ids in %d bytes", n, b)
	}
	if d.Expire(t0.Add(time.Hour)); d.Len() != 0 {
		t.Fatalf("after full expiry: %d ids", d.Len())
	}
	// Sequences continue across all of it.
	if dup, orig := d.Seen("scope", "again", t0.Add(time.Hour)); dup || orig != burst+11 {
		t.Fatalf("Seen after expiry = (%v, %d), want (false, %d)", dup, orig, burst+11)
	}
}

// TestWithCapacity: a Dedup sized for n ids fills to n without growing its
// index, holds that index when they expire, and refuses a bad capacity.
func TestWithCapacity(t *testing.T) {
	t.Parallel()
	if _, err := New(time.Second, WithCapacity(0)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("WithCapacity(0): %v", err)
	}
	const n = 100_000
	d, err := New(time.Second, WithCapacity(n))
	if err != nil {
		t.Fatal(err)
	}
	floor := d.Bytes()
	if floor < n*5 {
		t.Fatalf("a Dedup sized for %d ids holds %d bytes", n, floor)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for i := range n {
		if dup, _ := d.Seen("scope", fmt.Sprintf("id-%08d", i), t0); dup {
			t.Fatalf("id %d: duplicate", i)
		}
		if g := d.set.GrowthBytes(); g != 0 {
			t.Fatalf("id %d: the index grew (%d bytes of old index)", i, g)
		}
	}
	if b := d.Bytes(); b > 22.2*n { // 21.8 and the chunk directory and newest chunk's 0.2 at 100k
		t.Fatalf("%d ids in %d bytes", n, b)
	}
	if d.Expire(t0.Add(time.Hour)); d.Len() != 0 || d.Bytes() < floor-16<<10 {
		t.Fatalf("after expiry: %d ids in %d bytes, index floor %d", d.Len(), d.Bytes(), floor)
	}
	// A snapshot loaded into it keeps the floor.
	path := filepath.Join(t.TempDir(), "w.snap")
	d.Seen("scope", "one", t0.Add(time.Hour))
	if err := d.SaveSnapshot(path); err != nil {
		t.Fatal(err)
	}
	e, _ := New(time.Second, WithCapacity(n))
	if err := e.LoadSnapshot(path); err != nil {
		t.Fatal(err)
	}
	if dup, _ := e.Seen("scope", "one", t0.Add(time.Hour)); !dup || e.Bytes() < floor {
		t.Fatalf("restored: dup %v, %d bytes, floor %d", dup, e.Bytes(), floor)
	}
}
