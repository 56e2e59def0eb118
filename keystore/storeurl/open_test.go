package storeurl_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storeurl"
)

// mustParse is storeurl.Parse of a URL the test takes to be valid.
func mustParse(t *testing.T, url string) storeurl.Spec {
	t.Helper()
	spec, err := storeurl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// mustOpen opens spec and closes it when the test ends.
func mustOpen(t *testing.T, ctx context.Context, spec storeurl.Spec, opts storeurl.Options) *storeurl.Opened {
	t.Helper()
	s, err := storeurl.Open(ctx, spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A nats:// store that nobody serves fails at open, with the store named.
func TestOpenNATSDown(t *testing.T) {
	t.Parallel()
	spec := mustParse(t, "nats://127.0.0.1:1?timeout=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s, err := storeurl.Open(ctx, spec, storeurl.Options{}); err == nil {
		s.Close()
		t.Fatal("opened a NATS store on a closed port")
	} else if !strings.Contains(err.Error(), "nats store") {
		t.Fatalf("error does not name the store: %v", err)
	}
}

// A redis:// store opens without I/O; Check finds that nobody answers.
func TestOpenRedisDownCheck(t *testing.T) {
	t.Parallel()
	spec := mustParse(t, "redis://127.0.0.1:1/0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := mustOpen(t, ctx, spec, storeurl.Options{})
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check of a redis:// store nobody serves succeeded")
	}
}

// memory:PATH keeps its keys across a close and an open, and keeps
// Store's optional interfaces visible (lease renewal).
func TestOpenMemorySnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	spec := mustParse(t, "memory:"+filepath.Join(t.TempDir(), "keys.snap"))
	s, err := storeurl.Open(ctx, spec, storeurl.Options{SnapshotEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Store().(keystore.Extender); !ok {
		t.Errorf("%T does not renew leases", s.Store())
	}
	c, err := s.Store().Reserve(ctx, "k", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Store().Complete(ctx, c, []byte("done"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(s.Close(), s.Close()); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, ctx, spec, storeurl.Options{})
	got, err := s.Store().Reserve(ctx, "k", nil, time.Minute)
	if err != nil || got.State != keystore.Done || string(got.Result) != "done" {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

func TestOpenUnknownKind(t *testing.T) {
	t.Parallel()
	if _, err := storeurl.Open(context.Background(), storeurl.Spec{Kind: "mysql"}, storeurl.Options{}); !errors.Is(err, storeurl.ErrInvalid) {
		t.Fatalf("Open of an unknown kind: %v", err)
	}
}
