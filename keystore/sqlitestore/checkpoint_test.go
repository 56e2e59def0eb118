package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore/sqlitestore"
	"github.com/idem-go/idem/sqldialect"
)

// walPagesAfter opens a store on a fresh file the way idem serve does,
// writes keys Reserve+Complete, and returns the WAL file's size in pages.
func walPagesAfter(t *testing.T, keys int, checkpointer bool) int64 {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "keys.db")
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path)+sqlitestore.DSNSuffix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	s, err := sqlitestore.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if checkpointer {
		cdb, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cdb.Close() })
		cdb.SetMaxOpenConns(1)
		c, err := sqlitestore.NewCheckpointer(cdb, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run = %v, want context.Canceled", err)
			}
		})
	}
	for i := range keys {
		c, err := s.Reserve(ctx, fmt.Sprint("key-", i), nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c, make([]byte, 200), time.Hour); err != nil {
			t.Fatal(err)
		}
		if checkpointer && i%50 == 0 {
			// Let a checkpoint run: several of its 10 ms ticks, so that a
			// loaded machine (the suite runs packages side by side) still
			// schedules one between two bursts of writes.
			time.Sleep(60 * time.Millisecond)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	var page int64
	if err := db.QueryRow("PRAGMA page_size").Scan(&page); err != nil {
		t.Fatal(err)
	}
	return fi.Size() / page
}

// TestCheckpointer: with DSNSuffix the store's own connection no longer
// checkpoints at SQLite's default 1,000 pages (the stall this moves off the
// write path), and with a Checkpointer running beside it the WAL stays small.
func TestCheckpointer(t *testing.T) {
	const keys = 1500
	without := walPagesAfter(t, keys, false)
	if without <= 1000 {
		t.Fatalf("without a checkpointer the WAL has %d pages: the backstop setting did not apply (SQLite's default checkpoints at 1000)", without)
	}
	with := walPagesAfter(t, keys, true)
	if with >= 1000 {
		t.Fatalf("with a checkpointer the WAL grew to %d pages", with)
	}
	t.Logf("WAL pages after %d keys: %d without a checkpointer, %d with", keys, without, with)

	if _, err := sqlitestore.NewCheckpointer(nil, time.Second); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("nil db: %v", err)
	}
	if _, err := sqlitestore.NewCheckpointer(&sql.DB{}, time.Millisecond); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("1ms interval: %v", err)
	}
}
