package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/sqldialect"
)

// backstopPages is the wal_autocheckpoint setting (in pages) of the store's
// own connection: with the checkpointer running, writers leave checkpoints
// to it and checkpoint themselves only if the WAL grows past this many pages
// (64 MiB with 4 KiB pages), for example because the checkpointer stopped.
const backstopPages = 16384

// dsn is the store's own connection: sqldialect.SQLiteDSN with the
// backstop checkpoint setting.
func dsn(path string) string {
	return sqldialect.SQLiteDSN(path) + fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", backstopPages)
}

// checkpointer copies the WAL back into the database file from its own
// connection, off the write path.
//
// By default SQLite checkpoints inside the commit that makes the WAL cross
// 1,000 pages: that writer copies the pages and fsyncs the database file
// before its commit returns, and with one connection every other call waits
// behind it. In `idem serve` that stall was most of the p99. A passive
// checkpoint from another connection does the same work without blocking
// writers or readers, and SQLite starts the WAL over once it has been
// copied.
type checkpointer struct {
	db    *sql.DB
	every time.Duration
	ticks atomic.Int64 // checkpoints run by the ticker, for tests to wait on
}

// checkpoint runs one passive checkpoint and returns the WAL's size and how
// much of it is now copied into the database file, in pages.
func (c *checkpointer) checkpoint(ctx context.Context) (walPages, copied int, err error) {
	var busy int
	err = c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &walPages, &copied)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlitestore: checkpoint: %w", err)
	}
	return walPages, copied, nil
}

// run checkpoints every interval until ctx ends. A failed checkpoint is
// retried at the next tick; the backstop setting keeps the WAL bounded
// meanwhile.
func (c *checkpointer) run(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _, _ = c.checkpoint(ctx)
			c.ticks.Add(1)
		}
	}
}

// startCheckpointer opens a second connection to the SQLite file at path
// and runs a checkpointer on it every interval until the returned stop is
// called. stop ends it, runs a last checkpoint and closes the connection.
func startCheckpointer(path string, every time.Duration) (c *checkpointer, stop func() error, err error) {
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path))
	if err != nil {
		return nil, nil, fmt.Errorf("sqlitestore: checkpointer: %w", err)
	}
	db.SetMaxOpenConns(1)
	c = &checkpointer{db: db, every: every}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.run(ctx)
	}()
	return c, func() error {
		cancel()
		<-done
		_, _, cerr := c.checkpoint(context.Background())
		return errors.Join(cerr, db.Close())
	}, nil
}
