package memstore

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/compact"
	"github.com/idem-go/idem/keystore"
)

// TestSnapshotVersions restores a version-1 snapshot (every key through
// SipHash, as written before the AES path for UUIDs) and a version-2 one:
// each restored store finds every key done in the compact tier and every
// claim in progress, and writes the version it read, so a version-1
// store's keys are never looked up with the other hash.
func TestSnapshotVersions(t *testing.T) {
	ctx := context.Background()
	keys := []string{
		"0b6c5a3e-8f1d-4c2a-9e7b-3d4f5a6b7c8d", // canonical: the AES path in version 2
		"0B6C5A3E-8F1D-4C2A-9E7B-3D4F5A6B7C8D", // uppercase: SipHash in both, another key
		"order-17",
	}
	for _, v := range []struct {
		version byte
		hasher  func(compact.Key) *compact.Hasher
	}{{snapVersionV1, compact.NewSipHasher}, {snapVersion, compact.NewHasher}} {
		cfg, err := configure(nil)
		if err != nil {
			t.Fatal(err)
		}
		s := &Store{c: newCore(cfg, v.hasher(compact.NewKey())), prefix: scopePrefix(keystore.DefaultScope)}
		claims := map[string]keystore.Claim{}
		for _, k := range keys {
			c, err := s.Reserve(ctx, k, nil, time.Minute)
			if err != nil || c.State != keystore.Acquired {
				t.Fatalf("version %d: %s: %+v %v", v.version, k, c, err)
			}
			if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
				t.Fatal(err)
			}
			p := "pending-" + k
			if claims[p], err = s.Reserve(ctx, p, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		if err := s.WriteSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		if got := buf.Bytes()[4]; got != v.version {
			t.Fatalf("wrote version %d, want %d", got, v.version)
		}
		r, err := Restore(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("version %d: %v", v.version, err)
		}
		if r.c.fpKey.UUIDPath() != (v.version == snapVersion) {
			t.Fatalf("version %d restored with the UUID path %v", v.version, r.c.fpKey.UUIDPath())
		}
		for _, k := range keys {
			if c, err := r.Reserve(ctx, k, nil, time.Minute); err != nil || c.State != keystore.Done {
				t.Fatalf("version %d: restored %s: %+v %v, want done", v.version, k, c, err)
			}
			p := "pending-" + k
			if err := r.Complete(ctx, claims[p], nil, time.Hour); err != nil {
				t.Fatalf("version %d: Complete of restored %s: %v", v.version, p, err)
			}
		}
		buf.Reset()
		if err := r.WriteSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		if got := buf.Bytes()[4]; got != v.version {
			t.Fatalf("the store restored from version %d wrote version %d", v.version, got)
		}
	}
}
