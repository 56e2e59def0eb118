package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/sqldialect"
)

// BackstopCheckpointPages is the wal_autocheckpoint setting (in pages) for a
// store's own connections when a [Checkpointer] runs: writers then leave
// checkpoints to it and checkpoint themselves only if the WAL grows past
// this many pages (64 MiB with 4 KiB pages), for example because the
// checkpointer stopped.
const BackstopCheckpointPages = 16384

// DSNSuffix is appended to a sqldialect.SQLiteDSN for the store's own pool
// when a [Checkpointer] runs on a second pool: it raises wal_autocheckpoint
// to [BackstopCheckpointPages].
var DSNSuffix = fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", BackstopCheckpointPages)

// Checkpointer copies the WAL back into the database file from its own
// connection, off the write path.
//
// By default SQLite checkpoints inside the commit that makes the WAL cross
// 1,000 pages: that writer copies the pages and fsyncs the database file
// before its commit returns, and with one connection (as [New] recommends)
// every other call waits behind it. In `idem serve` that stall was most of
// the p99. A passive checkpoint from another connection does the same work
// without blocking writers or readers, and SQLite starts the WAL over once it
// has been copied.
//
// Open db on the same file as the store (sqldialect.SQLiteDSN, one
// connection), open the store's own pool with [DSNSuffix] appended, and run
// the checkpointer for as long as the store is used.
type Checkpointer struct {
	db    *sql.DB
	every time.Duration
}

// NewCheckpointer returns a checkpointer that runs a passive checkpoint on
// db every interval (at least 10 ms; 100 ms is a good default).
func NewCheckpointer(db *sql.DB, every time.Duration) (*Checkpointer, error) {
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: sqlitestore: checkpointer: nil *sql.DB", idem.ErrInvalidOption)
	case every < 10*time.Millisecond:
		return nil, fmt.Errorf("%w: sqlitestore: checkpointer: interval %v is shorter than 10ms", idem.ErrInvalidOption, every)
	}
	return &Checkpointer{db: db, every: every}, nil
}

// Checkpoint runs one passive checkpoint and returns the WAL's size and how
// much of it is now copied into the database file, in pages.
func (c *Checkpointer) Checkpoint(ctx context.Context) (walPages, copied int, err error) {
	var busy int
	err = c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &walPages, &copied)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlitestore: checkpoint: %w", err)
	}
	return walPages, copied, nil
}

// Run checkpoints every interval until ctx ends, and returns ctx's error.
// A failed checkpoint is retried at the next tick; the backstop setting keeps
// the WAL bounded meanwhile.
func (c *Checkpointer) Run(ctx context.Context) error {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			_, _, _ = c.Checkpoint(ctx)
		}
	}
}

// StartCheckpointer opens a second connection to the SQLite file at path
// and runs a [Checkpointer] on it every interval until the returned stop is
// called. stop ends it, runs a last checkpoint (so that a clean shutdown
// leaves the WAL copied back) and closes the connection. The store's own
// pool should be opened with [DSNSuffix].
func StartCheckpointer(path string, every time.Duration) (stop func() error, err error) {
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: checkpointer: %w", err)
	}
	db.SetMaxOpenConns(1)
	c, err := NewCheckpointer(db, every)
	if err != nil {
		db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	return func() error {
		cancel()
		<-done
		_, _, cerr := c.Checkpoint(context.Background())
		return errors.Join(cerr, db.Close())
	}, nil
}
