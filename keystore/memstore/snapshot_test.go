package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// snapshot returns the snapshot s writes.
func snapshot(t testing.TB, s *memstore.Store) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// snapFixture fills a clocked store with a key in every tier and state and
// returns it with the claims it holds.
func snapFixture(t *testing.T) (*memstore.Store, *clock, map[string]keystore.Claim) {
	t.Helper()
	ctx := context.Background()
	s, clk := newClocked(t)
	scoped, err := s.Scope("tenant")
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]keystore.Claim{}
	reserve := func(st keystore.Store, key string, fp []byte, lease time.Duration) keystore.Claim {
		c, err := st.Reserve(ctx, key, fp, lease)
		if err != nil || c.State != keystore.Acquired {
			t.Fatalf("Reserve %s: %+v %v", key, c, err)
		}
		claims[key] = c
		return c
	}
	complete := func(st keystore.Store, c keystore.Claim, result string, ttl time.Duration) {
		if err := st.Complete(ctx, c, []byte(result), ttl); err != nil {
			t.Fatal(err)
		}
	}
	complete(s, reserve(s, "done-empty", nil, time.Minute), "", time.Hour)            // compact tier
	complete(s, reserve(s, "done-result", nil, time.Minute), "r1", time.Hour)         // map tier
	complete(s, reserve(s, "done-fp", []byte("fp"), time.Minute), "", time.Hour)      // map tier, fingerprint
	complete(scoped, reserve(scoped, "scoped-done", nil, time.Minute), "", time.Hour) // compact, scoped
	complete(s, reserve(s, "short", nil, time.Minute), "", time.Second)               // expires before the restore
	complete(s, reserve(s, "forgotten", nil, time.Minute), "", time.Hour)             // forgotten below
	reserve(s, "pending", nil, time.Minute)                                           // in progress, pending tier
	reserve(s, "leased-fp", []byte("fp2"), time.Minute)                               // in progress, map tier
	reserve(scoped, "scoped-pending", nil, time.Minute)                               //
	if err := s.Forget(ctx, "forgotten"); err != nil {
		t.Fatal(err)
	}
	return s, clk, claims
}

// TestSnapshotRestoresEveryTier restores a store holding keys in every tier
// and checks each key's state, result, expiry and token, that claims taken
// before the snapshot still complete, that expired and forgotten keys are
// gone, and that new tokens are above the old ones.
func TestSnapshotRestoresEveryTier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, claims := snapFixture(t)
	snap := snapshot(t, s)
	before := map[string]keystore.KeyInfo{}
	scoped, _ := s.Scope("tenant")
	for _, k := range []string{"done-empty", "done-result", "done-fp", "pending", "leased-fp"} {
		if before[k], _ = s.Inspect(ctx, k); before[k].State == 0 {
			t.Fatalf("%s not found before the snapshot", k)
		}
	}
	for _, k := range []string{"scoped-done", "scoped-pending"} {
		before[k], _ = scoped.(keystore.Inspector).Inspect(ctx, k)
	}
	s.Close()
	clk.add(2 * time.Second) // "short" expires while the store is down
	r, err := memstore.Restore(bytes.NewReader(snap), memstore.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rs, _ := r.Scope("tenant")
	for k, want := range before {
		var st keystore.Store = r
		if k == "scoped-done" || k == "scoped-pending" {
			st = rs
		}
		got, err := st.(keystore.Inspector).Inspect(ctx, k)
		if err != nil {
			t.Fatalf("Inspect %s after restore: %v", k, err)
		}
		if got.State != want.State || got.Token != want.Token || !got.Expires.Equal(want.Expires) ||
			!bytes.Equal(got.Result, want.Result) || got.Fingerprint != want.Fingerprint {
			t.Errorf("%s: restored %+v, want %+v", k, got, want)
		}
	}
	if got := r.Len(); got != len(before) {
		t.Errorf("restored %d keys, want %d (short and forgotten left out)", got, len(before))
	}
	for _, k := range []string{"short", "forgotten"} {
		if c, err := r.Reserve(ctx, k, nil, time.Minute); err != nil || c.State != keystore.Acquired || c.Token <= claims[k].Token {
			t.Errorf("Reserve %s after restore: %+v %v, want acquired above %d", k, c, err, claims[k].Token)
		}
	}
	c, err := r.Reserve(ctx, "done-result", nil, time.Minute)
	if err != nil || c.State != keystore.Done || string(c.Result) != "r1" {
		t.Errorf("replay after restore: %+v %v", c, err)
	}
	if _, err := r.Reserve(ctx, "done-fp", []byte("other"), time.Minute); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Errorf("fingerprint kept: %v, want a mismatch", err)
	}
	// The holders of the restored leases complete with their old claims.
	if err := r.Complete(ctx, claims["pending"], nil, time.Hour); err != nil {
		t.Errorf("Complete of a restored pending lease: %v", err)
	}
	if err := rs.Complete(ctx, claims["scoped-pending"], []byte("x"), time.Hour); err != nil {
		t.Errorf("Complete of a restored scoped lease: %v", err)
	}
	if err := r.Complete(ctx, claims["leased-fp"], nil, time.Hour); err != nil {
		t.Errorf("Complete of a restored map-tier lease: %v", err)
	}
}

// TestSnapshotRefusesDamage flips every byte, truncates at every length
// and appends a byte: each is refused with ErrCorruptSnapshot.
func TestSnapshotRefusesDamage(t *testing.T) {
	t.Parallel()
	s, clk, _ := snapFixture(t)
	good := snapshot(t, s)
	restore := func(b []byte) error {
		r, err := memstore.Restore(bytes.NewReader(b), memstore.WithClock(clk.now))
		if err == nil {
			r.Close()
		}
		return err
	}
	if err := restore(good); err != nil {
		t.Fatal(err)
	}
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x5a
		if err := restore(bad); !errors.Is(err, memstore.ErrCorruptSnapshot) {
			t.Fatalf("byte %d of %d flipped: %v", i, len(good), err)
		}
		if err := restore(good[:i]); !errors.Is(err, memstore.ErrCorruptSnapshot) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	if err := restore(append(bytes.Clone(good), 0)); !errors.Is(err, memstore.ErrCorruptSnapshot) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// TestSnapshotLimits refuses a snapshot with more keys than WithMaxKeys
// allows, or results over WithMaxResultSize, and bad options.
func TestSnapshotLimits(t *testing.T) {
	t.Parallel()
	s, clk, _ := snapFixture(t)
	snap := snapshot(t, s)
	if _, err := memstore.Restore(bytes.NewReader(snap), memstore.WithClock(clk.now), memstore.WithMaxKeys(3)); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("too many keys: %v, want ErrFull", err)
	}
	if _, err := memstore.Restore(bytes.NewReader(snap), memstore.WithClock(clk.now), memstore.WithMaxResultSize(1)); !errors.Is(err, memstore.ErrCorruptSnapshot) {
		t.Errorf("result over the limit: %v, want ErrCorruptSnapshot", err)
	}
	if _, err := memstore.Restore(bytes.NewReader(snap), memstore.WithMaxKeys(0)); err == nil {
		t.Error("bad option accepted")
	}
	s.Close()
	if err := s.WriteSnapshot(io.Discard); err == nil {
		t.Error("snapshot of a closed store")
	}
}

// TestSnapshotFile saves atomically to a file only its owner can read, and
// loads it; a missing file is fs.ErrNotExist.
func TestSnapshotFile(t *testing.T) {
	t.Parallel()
	s, clk, _ := snapFixture(t)
	path := filepath.Join(t.TempDir(), "keys.snap")
	if _, err := memstore.Load(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
	for range 2 { // the second save replaces the first
		if err := s.SaveSnapshot(path); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v %v, want mode 0600", fi, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	r, err := memstore.Load(path, memstore.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Len() != s.Len()-1 { // the forgotten key is left out
		t.Fatalf("loaded %d keys, the store held %d", r.Len(), s.Len())
	}
	if err := os.WriteFile(path, []byte("IDMS\x01garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := memstore.Load(path); !errors.Is(err, memstore.ErrCorruptSnapshot) {
		t.Fatalf("garbage file: %v", err)
	}
}

// TestSnapshotDuringWrites takes snapshots while goroutines reserve and
// complete keys: every snapshot restores, and holds every key completed
// before it began, with the same token.
func TestSnapshotDuringWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers, perWriter = 4, 2000
	var mu sync.Mutex
	done := map[string]uint64{} // completed keys and their tokens
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				key := fmt.Sprintf("w%d-%d", w, i)
				c, err := s.Reserve(ctx, key, nil, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				result := []byte(nil)
				if i%3 == 0 {
					result = []byte("r")
				}
				if err := s.Complete(ctx, c, result, time.Hour); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				done[key] = c.Token
				mu.Unlock()
			}
		}()
	}
	for range 5 {
		mu.Lock()
		want := make(map[string]uint64, len(done))
		for k, v := range done {
			want[k] = v
		}
		mu.Unlock()
		r, err := memstore.Restore(bytes.NewReader(snapshot(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		for k, token := range want {
			if info, err := r.Inspect(ctx, k); err != nil || info.State != keystore.Done || info.Token != token {
				t.Fatalf("%s completed before the snapshot: restored %+v %v, want done with token %d", k, info, err, token)
			}
		}
		r.Close()
	}
	wg.Wait()
}

// FuzzRestore feeds Restore arbitrary bytes, seeded with a valid snapshot:
// it must refuse them with an error or return a store whose own snapshot
// restores again, never panic.
func FuzzRestore(f *testing.F) {
	s, clk := newClocked(f)
	ctx := context.Background()
	for i, result := range []string{"", "r", ""} {
		c, err := s.Reserve(ctx, fmt.Sprint("k", i), nil, time.Minute)
		if err != nil {
			f.Fatal(err)
		}
		if i < 2 {
			if err := s.Complete(ctx, c, []byte(result), time.Hour); err != nil {
				f.Fatal(err)
			}
		}
	}
	f.Add(snapshot(f, s))
	f.Add([]byte("IDMS\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := memstore.Restore(bytes.NewReader(b), memstore.WithClock(clk.now))
		if err != nil {
			return
		}
		defer r.Close()
		var again bytes.Buffer
		if err := r.WriteSnapshot(&again); err != nil {
			t.Fatal(err)
		}
		r2, err := memstore.Restore(&again, memstore.WithClock(clk.now))
		if err != nil {
			t.Fatalf("a restored store's snapshot is refused: %v", err)
		}
		if r2.Len() != r.Len() {
			t.Fatalf("restored %d keys, then %d", r.Len(), r2.Len())
		}
		r2.Close()
	})
}
