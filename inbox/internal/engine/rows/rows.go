package rows

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/sqldialect"
)

var _ engine.Engine = (*Engine)(nil)

// Engine is the rows layout's engine.
type Engine struct {
	h *engine.Host
	q queries
}

// New returns the engine of h's table, in the rows layout.
func New(h *engine.Host) *Engine { return &Engine{h: h, q: keyQueries(h.D, h.Table)} }

// Layout is engine.LayoutRows.
func (e *Engine) Layout() engine.Layout { return engine.LayoutRows }

// Prepare has nothing to do: the rows table is all there is.
func (e *Engine) Prepare(context.Context) error { return nil }

// Stale is false: the rows layout's statements do not name changing
// tables.
func (e *Engine) Stale(context.Context) bool { return false }

// frozen is the error of a statement refused by the frozen rows table:
// the table was migrated to the bucketed layout; the inbox verifies it
// again and reruns the transaction there.
func (e *Engine) frozen(err error) error {
	e.h.Unready()
	return fmt.Errorf("%w: %w", engine.ErrLayoutChanged, err)
}

// RecordOne records m's key unless present and reports whether it did.
func (e *Engine) RecordOne(ctx context.Context, tx *sql.Tx, m engine.Message) (bool, error) {
	res, err := e.h.Stmts.Exec(ctx, tx, e.q.insert, e.h.Consumer, m.Key, engine.NullBytes(m.Fingerprint))
	if err != nil {
		if engine.IsFrozen(e.h.D, err) {
			return false, e.frozen(err)
		}
		if e.h.D == sqldialect.MySQL && e.h.D.IsUniqueViolation(err) {
			// The key is recorded. MySQL rolled back this statement
			// only; the transaction goes on. Verify made sure the only
			// unique index that can fire is (consumer, idem_key).
			return false, nil
		}
		return false, fmt.Errorf("inbox: record key: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: record key: rows affected: %w", err)
	}
	return n == 1, nil
}

// Fingerprint reads the fingerprint recorded with m's key.
func (e *Engine) Fingerprint(ctx context.Context, tx *sql.Tx, m engine.Message) ([]byte, error) {
	var stored []byte
	err := tx.QueryRowContext(ctx, e.q.fingerprint, e.h.Consumer, m.Key).Scan(&stored)
	if err != nil {
		return nil, fmt.Errorf("inbox: read fingerprint: %w", err)
	}
	return stored, nil
}

// maxRowsPerInsert bounds one multi-row insert (3 parameters a row, well
// under every dialect's limit on bind parameters).
const maxRowsPerInsert = 500

// Record inserts the keys of msgs[idx...] and returns the set actually
// inserted. On MySQL, which has no RETURNING, it returns ErrSlowPath
// unless every key was new.
func (e *Engine) Record(ctx context.Context, tx *sql.Tx, msgs []engine.Message, idx []int) (map[string]bool, error) {
	inserted := make(map[string]bool, len(idx))
	for lo := 0; lo < len(idx); lo += maxRowsPerInsert {
		chunk := idx[lo:min(lo+maxRowsPerInsert, len(idx))]
		args := make([]any, 0, 3*len(chunk))
		for _, i := range chunk {
			args = append(args, e.h.Consumer, msgs[i].Key, engine.NullBytes(msgs[i].Fingerprint))
		}
		q := multiInsert(e.h.D, e.h.Table, len(chunk))
		if e.h.D == sqldialect.MySQL {
			// A plain multi-row INSERT: it inserts every row or, when a key
			// is recorded, fails whole with 1062 (never depending on
			// clientFoundRows, as an affected-row count would).
			if _, err := e.h.Stmts.Exec(ctx, tx, q, args...); err != nil {
				if e.h.D.IsUniqueViolation(err) {
					return nil, engine.ErrSlowPath
				}
				if engine.IsFrozen(e.h.D, err) {
					return nil, e.frozen(err)
				}
				return nil, fmt.Errorf("inbox: record keys: %w", err)
			}
			for _, i := range chunk {
				inserted[msgs[i].Key] = true
			}
			continue
		}
		rows, err := e.h.Stmts.Query(ctx, tx, q, args...)
		if err != nil {
			if engine.IsFrozen(e.h.D, err) {
				return nil, e.frozen(err)
			}
			return nil, fmt.Errorf("inbox: record keys: %w", err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, fmt.Errorf("inbox: record keys: %w", err)
			}
			inserted[k] = true
		}
		if err := rows.Err(); err != nil {
			if engine.IsFrozen(e.h.D, err) {
				return nil, e.frozen(err)
			}
			return nil, fmt.Errorf("inbox: record keys: %w", err)
		}
	}
	return inserted, nil
}

// Sweep deletes this consumer's keys recorded more than olderThan ago, at
// most batch rows per statement, each statement its own short
// transaction, until one deletes fewer than batch rows or ctx ends.
func (e *Engine) Sweep(ctx context.Context, olderThan time.Duration, batch int) (deleted int, err error) {
	age := olderThan.Microseconds()
	if e.h.D == sqldialect.SQLite {
		age = olderThan.Milliseconds()
	}
	for {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		var n int64
		err := e.h.Retry(ctx, func() error {
			tx, err := e.h.DB.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("inbox: sweep: begin: %w", err)
			}
			defer tx.Rollback()
			// The horizon recorded by any Inbox of this consumer binds
			// this one too, with or without WithRedeliveryHorizon.
			h, err := e.h.Horizon.Stored(ctx, tx, e.h.Consumer)
			if err != nil {
				return err
			}
			if olderThan < h {
				return fmt.Errorf("inbox: asked to delete keys older than %v, the horizon recorded for consumer %q in %s is %v: %w", olderThan, e.h.Consumer, e.h.Horizon.Table, h, engine.ErrHorizon)
			}
			res, err := tx.ExecContext(ctx, e.q.sweep, e.h.Consumer, age, batch)
			if err != nil {
				return fmt.Errorf("inbox: sweep: %w", err)
			}
			if n, err = res.RowsAffected(); err != nil {
				return fmt.Errorf("inbox: sweep: %w", err)
			}
			return tx.Commit()
		})
		if err != nil {
			return deleted, err
		}
		deleted += int(n)
		e.h.Swept(int(n))
		if n < int64(batch) {
			e.h.Logger.DebugContext(ctx, "inbox: sweep done", "consumer", e.h.Consumer, "deleted", deleted)
			return deleted, nil
		}
	}
}

// Find looks the key up in the rows table.
func (e *Engine) Find(ctx context.Context, tx *sql.Tx, consumer, key string) (engine.Record, error) {
	rec := engine.Record{Consumer: consumer, Key: key, Layout: engine.LayoutRows}
	return rec, FindIn(ctx, tx, e.h.D, e.h.Table, &rec)
}

// FindIn looks rec's key up in the rows table t (of the rows layout, or
// frozen by a migration to buckets) and fills rec.
func FindIn(ctx context.Context, tx *sql.Tx, d sqldialect.Dialect, t string, rec *engine.Record) error {
	var us int64
	err := tx.QueryRowContext(ctx, lookupSQL(d, t), rec.Consumer, rec.Key).Scan(&rec.Fingerprint, &us)
	if errors.Is(err, sql.ErrNoRows) {
		return engine.NotRecorded(rec.Consumer, rec.Key)
	}
	if err != nil {
		return fmt.Errorf("inbox: look up key: %w", err)
	}
	rec.Table, rec.RecordedAt = t, time.UnixMicro(us).UTC()
	rec.Layout, rec.BucketWidth = engine.LayoutRows, 0
	return nil
}

// lookupSQL reads a rows-layout key's fingerprint and time (Unix µs).
func lookupSQL(d sqldialect.Dialect, t string) string {
	switch d {
	case sqldialect.Postgres:
		return `SELECT fingerprint, (extract(epoch FROM processed_at) * 1000000)::bigint FROM ` + t + ` WHERE consumer = $1 AND idem_key = $2`
	case sqldialect.MySQL:
		return `SELECT fingerprint, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', processed_at) FROM ` + t + ` WHERE consumer = ? AND idem_key = ?`
	}
	return `SELECT fingerprint, processed_at * 1000 FROM ` + t + ` WHERE consumer = ? AND idem_key = ?`
}

// Forget deletes the key's row.
func (e *Engine) Forget(ctx context.Context, tx *sql.Tx, consumer, key string) (func(), error) {
	rec, err := e.Find(ctx, tx, consumer, key)
	if err != nil {
		return nil, err
	}
	return nil, Delete(ctx, tx, e.h.D, e.h.Table, rec)
}

// Delete deletes rec's row from the rows table t.
func Delete(ctx context.Context, tx *sql.Tx, d sqldialect.Dialect, t string, rec engine.Record) error {
	res, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE consumer = `+d.Placeholder(1)+` AND idem_key = `+d.Placeholder(2), rec.Consumer, rec.Key)
	if err != nil {
		return engine.StatementError(ctx, d, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("inbox: forget key %q: %d rows deleted from %s, want 1: %w", rec.Key, n, rec.Table, errors.Join(err, engine.ErrBucketsChanged))
	}
	return nil
}
