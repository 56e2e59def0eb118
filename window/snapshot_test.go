package window_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-go/idem/window"
)

func snapshotOf(t *testing.T, d *window.Dedup) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := d.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSnapshotRoundTrip checks that a restored Dedup answers as the
// original: duplicates with their original sequences, expiry at the same
// instant, and sequences that carry on.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	d := newDedup(t)
	for i := range 3000 {
		d.Seen("s", fmt.Sprint(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	data := snapshotOf(t, d)
	r := newDedup(t)
	if err := r.ReadSnapshot(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(3 * time.Second)
	for i := range 3000 {
		if dup, orig := r.Seen("s", fmt.Sprint(i), at); !dup || orig != uint64(i+1) {
			t.Fatalf("id %d after restore = (%v, %d), want (true, %d)", i, dup, orig, i+1)
		}
	}
	if dup, orig := r.Seen("s", "new", at); dup || orig != 3001 {
		t.Fatalf("new id after restore = (%v, %d), want (false, 3001)", dup, orig)
	}
	// Id 0 was first accepted at t0: new again exactly at t0 + w.
	if dup, _ := r.Seen("s", "0", t0.Add(w)); dup {
		t.Fatal("id 0 still a duplicate at t0 + w")
	}
	if !bytes.Equal(snapshotOf(t, d), data) {
		t.Fatal("writing a snapshot changed the Dedup")
	}
}

// TestSnapshotRefusesDamage flips every byte of a small snapshot, cuts it
// at every length, and appends a byte: each is refused with
// ErrCorruptSnapshot and leaves the Dedup as it was.
func TestSnapshotRefusesDamage(t *testing.T) {
	t.Parallel()
	d := newDedup(t)
	for i := range 5 {
		d.Seen("s", fmt.Sprint(i), t0)
	}
	data := snapshotOf(t, d)
	var bad [][]byte
	for i := range data {
		b := bytes.Clone(data)
		b[i] ^= 0x40
		bad = append(bad, b, data[:i])
	}
	bad = append(bad, append(bytes.Clone(data), 0))
	r := newDedup(t)
	r.Seen("s", "kept", t0)
	for i, b := range bad {
		if err := r.ReadSnapshot(bytes.NewReader(b)); !errors.Is(err, window.ErrCorruptSnapshot) {
			t.Fatalf("damaged snapshot %d: %v, want ErrCorruptSnapshot", i, err)
		}
	}
	if dup, orig := r.Seen("s", "kept", t0); !dup || orig != 1 || r.Len() != 1 {
		t.Fatalf("a refused snapshot changed the Dedup: (%v, %d), Len %d", dup, orig, r.Len())
	}
}

func TestSnapshotFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "window.snap")
	d := newDedup(t)
	if err := d.LoadSnapshot(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadSnapshot of a missing file = %v, want fs.ErrNotExist", err)
	}
	d.Seen("s", "a", t0)
	if err := d.SaveSnapshot(path); err != nil {
		t.Fatal(err)
	}
	d.Seen("s", "b", t0)
	if err := d.SaveSnapshot(path); err != nil { // replaces the first
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("%d files beside the snapshot, want none (temporary files removed)", len(ents)-1)
	}
	r := newDedup(t)
	if err := r.LoadSnapshot(path); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 2 {
		t.Fatalf("restored %d ids, want 2", r.Len())
	}
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, data[:len(data)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.LoadSnapshot(path); !errors.Is(err, window.ErrCorruptSnapshot) {
		t.Fatalf("truncated file: %v, want ErrCorruptSnapshot", err)
	}
}

// A restarted process keeps its window: save on shutdown (or periodically),
// load on start. A missing file just means a first start.
func ExampleDedup_SaveSnapshot() {
	path := filepath.Join(os.TempDir(), "idem-window-example.snap")
	defer os.Remove(path)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	before, err := window.New(2 * time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	before.Seen("ORDERS", "order-1", now)
	if err := before.SaveSnapshot(path); err != nil {
		log.Fatal(err)
	}

	after, err := window.New(2 * time.Minute) // the restarted process
	if err != nil {
		log.Fatal(err)
	}
	if err := after.LoadSnapshot(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Fatal(err)
	}
	dup, seq := after.Seen("ORDERS", "order-1", now.Add(30*time.Second))
	fmt.Println("retry after restart: duplicate", dup, "seq", seq)
	// Output:
	// retry after restart: duplicate true seq 1
}
