package pgstore_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/pgstore"
	"github.com/idem-go/idem/keystore/storetest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		s, err := pgstore.New(testenv.Postgres(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	s, err := pgstore.New(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	view, err := s.Scope("other")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Reserve(ctx, "k", nil, time.Minute); !errors.Is(err, keystore.ErrClosed) {
		t.Fatalf("Reserve after Close: %v", err)
	}
	if _, err := view.Reserve(ctx, "k", nil, time.Minute); !errors.Is(err, keystore.ErrClosed) {
		t.Fatalf("Reserve on a view after Close: %v", err)
	}
	if err := s.Complete(ctx, c, nil, time.Minute); !errors.Is(err, keystore.ErrClosed) {
		t.Fatalf("Complete after Close: %v", err)
	}
}

func TestOptions(t *testing.T) {
	db := testenv.Postgres(t)
	for _, o := range []pgstore.Option{
		pgstore.WithTable("bad-name"), pgstore.WithTable("a.b.c"), pgstore.WithTable(""),
		pgstore.WithScope(""), pgstore.WithScope("{x}"), pgstore.WithMaxResultSize(-1),
	} {
		if _, err := pgstore.New(db, o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
	}
	if _, err := pgstore.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
}

// Migrate twice, concurrently, and with a schema-qualified table.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	var schema string
	if err := db.QueryRow("SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(db, pgstore.WithTable(schema+".custom_keys"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- s.Migrate(ctx) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	c, err := s.Reserve(ctx, "k", nil, keystore.DefaultLease)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("Reserve on a schema-qualified table: %+v %v", c, err)
	}
	if len(s.MigrationSQL()) == 0 {
		t.Fatal("no migration SQL")
	}
}
