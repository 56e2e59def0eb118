package bucketmysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
)

var _ engine.Engine = (*Engine)(nil)

// Engine is the bucketed layout's engine on MySQL and MariaDB.
type Engine struct {
	h *engine.Host
	b *bucket.State
}

// New returns the engine of the table whose state bucket.Load read.
func New(b *bucket.State) *Engine { return &Engine{h: b.Host(), b: b} }

// Layout is engine.LayoutBuckets.
func (e *Engine) Layout() engine.Layout { return engine.LayoutBuckets }

// State is the table's state (tests).
func (e *Engine) State() *bucket.State { return e.b }

// Prepare makes the bucket tables of now exist, with a fresh clock and
// lookup filters (see bucket.State.Ensure).
func (e *Engine) Prepare(ctx context.Context) error { return e.b.Ensure(ctx, nil) }

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
	return e.b.Find(ctx, tx, consumer, key, nil)
}

// Forget deletes the key from the table Find reports; InnoDB's row locks
// order it with a concurrent delivery of the key.
func (e *Engine) Forget(ctx context.Context, tx *sql.Tx, consumer, key string) (func(), error) {
	rec, err := e.Find(ctx, tx, consumer, key)
	if err != nil {
		return nil, err
	}
	return nil, e.b.Delete(ctx, tx, rec)
}

// Sweep drops the expired buckets, each by a statement of its own.
func (e *Engine) Sweep(ctx context.Context, olderThan time.Duration, _ int) (int, error) {
	n, err := e.retire(ctx, olderThan)
	if err != nil {
		return n, err
	}
	e.h.Swept(n)
	return n, nil
}

// maxRowsPerInsert bounds one multi-row insert (3 parameters a row, well
// under every dialect's limit on bind parameters).
const maxRowsPerInsert = 500
