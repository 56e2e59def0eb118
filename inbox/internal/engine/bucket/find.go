package bucket

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/rows"
	"github.com/idem-go/idem/sqldialect"
)

// Find looks the key up in every live bucket, newest first, then in more
// (SQLite's runs; nil elsewhere), then, after a migration, in the frozen
// rows table.
func (b *State) Find(ctx context.Context, tx *sql.Tx, consumer, key string, more func(rec *engine.Record, d any) (bool, error)) (engine.Record, error) {
	rec := engine.Record{Consumer: consumer, Key: key, Layout: engine.LayoutBuckets, BucketWidth: time.Duration(b.Width) * time.Second}
	d := b.Param(b.Digest(consumer, key))
	starts, _ := b.Snapshot()
	for _, s := range slices.Backward(starts) {
		ok, err := b.Row(ctx, tx, Name(b.Table, s), d, &rec.Fingerprint)
		if err != nil {
			return rec, err
		}
		if ok {
			rec.Table, rec.Bucket = Name(b.Table, s), time.Unix(s, 0).UTC()
			return rec, nil
		}
	}
	if more != nil {
		ok, err := more(&rec, d)
		if err != nil || ok {
			return rec, err
		}
	}
	if !b.Legacy.Load() {
		return rec, engine.NotRecorded(consumer, key)
	}
	// In the frozen rows table, the Record is the rows layout's.
	err := rows.FindIn(ctx, tx, b.D, b.Table, &rec)
	return rec, err
}

// Row reads the fingerprint of digest d (as Param binds it) in a bucket
// or run table.
func (b *State) Row(ctx context.Context, tx *sql.Tx, table string, d any, f *[]byte) (bool, error) {
	q := `SELECT fingerprint FROM ` + table + ` WHERE d = ` + b.D.Placeholder(1)
	if b.D == sqldialect.Postgres {
		q += `::uuid`
	}
	err := tx.QueryRowContext(ctx, q, d).Scan(f)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, engine.StatementError(ctx, b.D, err)
	}
	return true, nil
}

// Delete deletes the key Find reported from its bucket (or from the frozen
// rows table).
func (b *State) Delete(ctx context.Context, tx *sql.Tx, rec engine.Record) error {
	if rec.Layout != engine.LayoutBuckets {
		return rows.Delete(ctx, tx, b.D, b.Table, rec)
	}
	q := `DELETE FROM ` + rec.Table + ` WHERE d = ` + b.D.Placeholder(1)
	if b.D == sqldialect.Postgres {
		q += `::uuid`
	}
	res, err := tx.ExecContext(ctx, q, b.Param(b.Digest(rec.Consumer, rec.Key)))
	if err != nil {
		return engine.StatementError(ctx, b.D, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("inbox: forget key %q: %d rows deleted from %s, want 1: %w", rec.Key, n, rec.Table, errors.Join(err, engine.ErrBucketsChanged))
	}
	return nil
}

// Host is the Host the state was loaded with.
func (b *State) Host() *engine.Host { return b.h }

// SkewClock moves the state's idea of the database clock by d and stops
// it from being measured again (tests: two Inbox values in different
// buckets).
func (b *State) SkewClock(d time.Duration) {
	b.offsetUS.Add(d.Microseconds())
	b.syncedNS.Store(time.Now().Add(time.Hour).UnixNano())
}

// Filters is the number of lookup filters held (tests).
func (b *State) Filters() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.filters)
}
