package bucketsql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/inbox/internal/engine/runs"
	"github.com/idem-go/idem/sqldialect"
)

var _ engine.Engine = (*Engine)(nil)

// Engine is the bucketed layout's engine on PostgreSQL and SQLite.
type Engine struct {
	h    *engine.Host
	b    *bucket.State
	runs *runs.Tree // SQLite tables whose buckets hold runs; nil otherwise
}

// New returns the engine of the table whose state bucket.Load read.
func New(b *bucket.State) *Engine {
	e := &Engine{h: b.Host(), b: b}
	if b.HasRuns && b.D == sqldialect.SQLite {
		e.runs = runs.New(b)
	}
	return e
}

// Layout is engine.LayoutBuckets.
func (e *Engine) Layout() engine.Layout { return engine.LayoutBuckets }

// State is the table's state (tests).
func (e *Engine) State() *bucket.State { return e.b }

// Runs is the table's runs on SQLite; nil elsewhere (tests).
func (e *Engine) Runs() *runs.Tree { return e.runs }

// Prepare makes the bucket tables of now exist, with a fresh clock and
// lookup filters, after flushing the runs this process filled (see
// bucket.State.Ensure).
func (e *Engine) Prepare(ctx context.Context) error {
	if e.runs == nil {
		return e.b.Ensure(ctx, nil)
	}
	return e.b.Ensure(ctx, e.runs.Maintain)
}

// Stale reports whether the bucket list or the rows table changed since
// a failed statement was built.
func (e *Engine) Stale(ctx context.Context) bool { return e.b.Stale(ctx) }

// RecordOne records m's key unless present and reports whether it did.
func (e *Engine) RecordOne(ctx context.Context, tx *sql.Tx, m engine.Message) (bool, error) {
	got, err := e.Record(ctx, tx, []engine.Message{m}, []int{0})
	return got[m.Key], err
}

// Find looks the key up in every table that may hold it.
func (e *Engine) Find(ctx context.Context, tx *sql.Tx, consumer, key string) (engine.Record, error) {
	if e.runs == nil {
		return e.b.Find(ctx, tx, consumer, key, nil)
	}
	return e.b.Find(ctx, tx, consumer, key, func(rec *engine.Record, d any) (bool, error) {
		return e.runs.Find(ctx, tx, rec, d)
	})
}

// Forget deletes the key from the table Find reports, after taking the
// locks a concurrent delivery of the key takes: its advisory lock on
// PostgreSQL, the write lock on SQLite.
func (e *Engine) Forget(ctx context.Context, tx *sql.Tx, consumer, key string) (func(), error) {
	switch e.b.D {
	case sqldialect.Postgres:
		if err := e.lockDigests(ctx, tx, [][16]byte{e.b.Digest(consumer, key)}); err != nil {
			return nil, err
		}
	case sqldialect.SQLite:
		// A write first: the write lock, so the run list read next
		// is the latest and stays so.
		if _, err := tx.ExecContext(ctx, `UPDATE `+e.b.Meta+` SET value = value WHERE name = 'salt'`); err != nil {
			return nil, fmt.Errorf("inbox: forget: %w", err)
		}
	}
	rec, err := e.Find(ctx, tx, consumer, key)
	if err != nil {
		return nil, err
	}
	if rec.Run {
		return e.runs.Forget(ctx, tx, rec)
	}
	return nil, e.b.Delete(ctx, tx, rec)
}

// Sweep drops the expired buckets (retire), then packs, on PostgreSQL,
// the buckets sealed for a width; a packing that fails is logged and
// tried again by the next Sweep.
func (e *Engine) Sweep(ctx context.Context, olderThan time.Duration, _ int) (int, error) {
	n, err := e.retire(ctx, olderThan)
	if err != nil {
		return n, err
	}
	e.h.Swept(n)
	if _, err := e.Pack(ctx); err != nil {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		e.h.Logger.WarnContext(ctx, "inbox: packing a sealed bucket failed; the next Sweep tries again", "err", err)
	}
	return n, nil
}

// maxRowsPerInsert bounds one multi-row insert (3 parameters a row, well
// under every dialect's limit on bind parameters).
const maxRowsPerInsert = 500
