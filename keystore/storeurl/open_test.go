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

// A nats:// store that nobody serves fails at open, with the store named.
func TestOpenNATSDown(t *testing.T) {
	t.Parallel()
	spec, err := storeurl.Parse("nats://127.0.0.1:1?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
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
	spec, err := storeurl.Parse("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := storeurl.Open(ctx, spec, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check of a redis:// store nobody serves succeeded")
	}
}

// memory:PATH keeps its keys across a close and an open, and keeps
// Store's optional interfaces visible (lease renewal).
func TestOpenMemorySnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	spec, err := storeurl.Parse("memory:" + filepath.Join(t.TempDir(), "keys.snap"))
	if err != nil {
		t.Fatal(err)
	}
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
	s, err = storeurl.Open(ctx, spec, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
