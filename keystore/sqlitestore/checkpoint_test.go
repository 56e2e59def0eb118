package sqlitestore

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// walPagesAfter opens a store on a fresh file, writes keys
// Reserve+Complete, and returns the WAL file's size in pages. With
// withCheckpointer it is opened as Open does (with 10 ms ticks); without, its
// one connection has the backstop setting and nothing else checkpoints.
func walPagesAfter(t *testing.T, keys int, withCheckpointer bool) int64 {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "keys.db")
	var (
		s    *sqlstore.Store
		db   *sql.DB
		ckpt *checkpointer
	)
	if withCheckpointer {
		o, err := open(path, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close() })
		s, db, ckpt = o.Store, o.DB(), o.ckpt
	} else {
		var err error
		if db, err = sql.Open("sqlite", dsn(path)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(1)
		if s, err = sqlstore.New(db, sqldialect.SQLite); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		c, err := s.Reserve(ctx, fmt.Sprint("key-", i), nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c, make([]byte, 200), time.Hour); err != nil {
			t.Fatal(err)
		}
		if withCheckpointer && i%50 == 0 {
			// Wait for a checkpoint that started after this burst of
			// writes (two ticks from now), however loaded the machine.
			n := ckpt.ticks.Load()
			for ckpt.ticks.Load() < n+2 {
				time.Sleep(time.Millisecond)
			}
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

// TestCheckpointer: with the backstop setting the store's own connection no
// longer checkpoints at SQLite's default 1,000 pages (the stall this moves
// off the write path), and with the checkpointer running beside it the WAL
// stays small.
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
}

// TestStopCheckpoints: stopping the checkpointer runs a last checkpoint, so
// that a clean shutdown leaves the WAL copied back.
func TestStopCheckpoints(t *testing.T) {
	ctx := t.Context()
	s, err := open(filepath.Join(t.TempDir(), "keys.db"), time.Hour) // no tick during the test
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.Reserve(ctx, "order-42", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c, []byte("created"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	var wal, copied int64 // the WAL's pages, and how many are in the database file
	if err := s.DB().QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(new(int), &wal, &copied); err != nil {
		t.Fatal(err)
	}
	if wal != copied {
		t.Fatalf("after stop %d of %d WAL pages are copied back", copied, wal)
	}
	s.stop = func() error { return nil }
}
