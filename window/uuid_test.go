package window

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idem-go/idem/internal/compact"
)

// TestUUIDIDs runs canonical UUID ids (the AES fingerprint path) beside
// the same UUIDs in uppercase (the SipHash path) through one Dedup: each
// spelling is its own id, each is a duplicate of itself, scopes stay
// apart, and a snapshot round trip keeps all of them.
func TestUUIDIDs(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	d, _ := New(time.Hour)
	type key struct{ scope, id string }
	seqs := map[key]uint64{}
	var keys []key
	for range 500 {
		u := uuid.NewString()
		for _, k := range []key{{"a", u}, {"b", u}, {"a", strings.ToUpper(u)}} {
			dup, seq, err := d.Add(k.scope, k.id, t0)
			if dup || err != nil {
				t.Fatalf("Add(%q, %q) first time: dup %v, err %v", k.scope, k.id, dup, err)
			}
			seqs[k] = seq
			keys = append(keys, k)
		}
	}
	check := func(d *Dedup, when string) {
		t.Helper()
		for _, k := range keys {
			dup, seq, err := d.Add(k.scope, k.id, t0.Add(time.Minute))
			if !dup || seq != seqs[k] || err != nil {
				t.Fatalf("%s: Add(%q, %q) = %v, %d, %v; want a duplicate of %d", when, k.scope, k.id, dup, seq, err, seqs[k])
			}
		}
	}
	check(d, "same Dedup")
	var buf bytes.Buffer
	if err := d.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if v := buf.Bytes()[4]; v != snapVersion {
		t.Fatalf("a new Dedup wrote version %d, want %d", v, snapVersion)
	}
	r, _ := New(time.Hour)
	if err := r.ReadSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	check(r, "restored")
	if dup, _, _ := r.Add("c", keys[0].id, t0.Add(time.Minute)); dup {
		t.Fatal("restored Dedup: a UUID in a new scope is a duplicate")
	}
}

// TestSnapshotVersion1 checks that a version-1 snapshot (every id
// fingerprinted with SipHash, as builds before the UUID path wrote it)
// loads, that its UUID ids are still recognised, that ids added after the
// restore are fingerprinted the same way, and that the Dedup writes
// version 1 again; and that an unknown version is refused.
func TestSnapshotVersion1(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	old, _ := New(time.Hour)
	old.key.Store(compact.NewSipHasher(compact.NewKey())) // as an earlier build made it
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = uuid.NewString()
		if dup, _, _ := old.Add("s", ids[i], t0); dup {
			t.Fatal("duplicate")
		}
	}
	var buf bytes.Buffer
	if err := old.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	v1 := bytes.Clone(buf.Bytes())
	if v1[4] != snapVersionV1 {
		t.Fatalf("a SipHash-only Dedup wrote version %d", v1[4])
	}
	d, _ := New(time.Hour)
	if err := d.ReadSnapshot(bytes.NewReader(v1)); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if dup, _, _ := d.Add("s", id, t0); !dup {
			t.Fatalf("restored from version 1: %s is not a duplicate", id)
		}
	}
	fresh := uuid.NewString()
	if dup, _, _ := d.Add("s", fresh, t0); dup {
		t.Fatal("a new id is a duplicate")
	}
	buf.Reset()
	if err := d.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[4] != snapVersionV1 {
		t.Fatalf("restored from version 1, wrote version %d", buf.Bytes()[4])
	}
	again, _ := New(time.Hour)
	if err := again.ReadSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(ids, fresh) {
		if dup, _, _ := again.Add("s", id, t0); !dup {
			t.Fatalf("second restore: %s is not a duplicate", id)
		}
	}

	v3 := bytes.Clone(v1)
	v3[4] = 3
	err := d.ReadSnapshot(bytes.NewReader(v3))
	if !errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), "unsupported version 3") {
		t.Fatalf("version 3: %v", err)
	}
}
