package bucket

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/internal/ddl"
)

// Ensure makes sure, before a transaction starts, that the bucket
// keys go to exists and, when that is the current one, that the next one
// does too, and that the clock offset is fresh. It runs DDL in its own
// short transactions, never inside the caller's (SQLite pools of one
// connection would wait on themselves).
//
// Why a cached list of buckets is enough: tables are only ever created
// forward (the current bucket and the next, and never one older than the
// newest that exists), and every writer knows the bucket after its own. A
// key is therefore written only into a bucket that every writer whose
// clock is less than one bucket width apart already lists, and probes.
// The clocks are the database's, measured every clockSyncEvery.
func (b *State) Ensure(ctx context.Context, maintain func(context.Context) error) error {
	if b.h.Stmts != nil {
		b.PrepareMissed(ctx, b.h.Stmts.P)
	}
	if time.Since(time.Unix(0, b.syncedNS.Load())) > clockSyncEvery {
		if err := b.h.ReadOnlyTx(ctx, func(tx *sql.Tx) error { return b.SyncClock(ctx, tx) }); err != nil {
			return fmt.Errorf("inbox: read the database clock: %w", err)
		}
	}
	if maintain != nil {
		if err := maintain(ctx); err != nil {
			return err
		}
	}
	cur := b.Current()
	starts, _ := b.Snapshot()
	if t, ok := Target(starts, cur); ok && t != starts[len(starts)-1] {
		return b.BuildFilters(ctx) // a later bucket is known too
	}
	if err := b.Refresh(ctx); err != nil && !errors.Is(err, engine.ErrBucketsChanged) {
		return err
	}
	starts, _ = b.Snapshot()
	var create []int64
	if len(starts) == 0 || cur >= starts[len(starts)-1] {
		for _, s := range []int64{cur, cur + b.Width} {
			if !slices.Contains(starts, s) {
				create = append(create, s)
			}
		}
	}
	if len(create) == 0 {
		return b.BuildFilters(ctx)
	}
	err := b.h.Retry(ctx, func() error {
		tx, err := b.h.DB.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: create bucket: begin: %w", err)
		}
		defer tx.Rollback()
		// Every process reaches a bucket boundary at about the same
		// moment and creates the same tables: on PostgreSQL the schema
		// lock makes the others wait and then find them.
		if err := ddl.Lock(ctx, tx, b.D, b.Table); err != nil {
			return fmt.Errorf("inbox: create bucket: %w", err)
		}
		for _, s := range create {
			if _, err := tx.ExecContext(ctx, TableSQL(b.D, b.Table, s)); err != nil {
				if ddl.LostCreateRace(b.D, err) {
					// A process without the lock (an earlier release)
					// created it at once. It exists: retry reads it.
					return engine.ErrBucketsChanged
				}
				return fmt.Errorf("inbox: create bucket %s: %w", Name(b.Table, s), err)
			}
		}
		return tx.Commit()
	})
	if err != nil {
		return err
	}
	if err := b.Refresh(ctx); err != nil && !errors.Is(err, engine.ErrBucketsChanged) {
		return err
	}
	return b.BuildFilters(ctx)
}

// Refresh reads the bucket list again; it reports engine.ErrBucketsChanged
// when it differs from the cached one.
func (b *State) Refresh(ctx context.Context) error {
	var starts []int64
	err := b.h.ReadOnlyTx(ctx, func(tx *sql.Tx) (err error) {
		starts, err = b.List(ctx, tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("inbox: list bucket tables: %w", err)
	}
	if b.SetStarts(starts) {
		return engine.ErrBucketsChanged
	}
	return nil
}

// Stale reports whether the bucket list or the rows table changed
// since the failed statement was built. It runs outside any transaction.
func (b *State) Stale(ctx context.Context) bool {
	ctx = context.WithoutCancel(ctx)
	if err := b.Refresh(ctx); errors.Is(err, engine.ErrBucketsChanged) {
		return true
	}
	if !b.Legacy.Load() {
		return false
	}
	var gone bool
	_ = b.h.ReadOnlyTx(ctx, func(tx *sql.Tx) error {
		ok, err := engine.TableExists(ctx, tx, b.D, b.Table)
		gone = err == nil && !ok
		return err
	})
	if gone {
		b.ForgetLegacy()
	}
	return gone
}
