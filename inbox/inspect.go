package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/sqldialect"
)

// ErrNotRecorded is returned by [Inbox.Inspect] and [Inbox.Forget] when the
// key is not recorded for the consumer (never processed, retired by Sweep,
// or already forgotten).
var ErrNotRecorded = errors.New("inbox: key not recorded")

// Record is what the key table knows of one recorded key.
type Record struct {
	Consumer string
	Key      string
	Layout   Layout
	// Table is the table that holds the key: the rows table, a bucket
	// table (<table>_k<start>), or on SQLite one of a bucket's immutable
	// runs (<table>_k<start>_r…), in which case Run is true.
	Table string
	Run   bool
	// RecordedAt is when the key was recorded (the database's clock); the
	// rows layout only. Zero in the bucketed layout, which stores no time.
	RecordedAt time.Time
	// Bucket is the start of the time bucket that holds the key, and
	// BucketWidth its width (bucketed layout; zero otherwise). The key
	// was recorded before Bucket+BucketWidth, and is retired with the
	// whole bucket.
	Bucket      time.Time
	BucketWidth time.Duration
	// Fingerprint is the payload fingerprint recorded with the key; nil
	// when it was recorded without one.
	Fingerprint []byte
}

// Inspect returns what the key table holds for key under consumer (which
// may differ from the Inbox's own consumer), or an error wrapping
// [ErrNotRecorded]. It reads only, in a transaction of its own.
func (in *Inbox) Inspect(ctx context.Context, consumer, key string) (Record, error) {
	var rec Record
	err := in.keyTx(ctx, consumer, key, func(tx *sql.Tx) (func(), error) {
		var err error
		rec, err = in.find(ctx, tx, consumer, key)
		return nil, err
	})
	return rec, err
}

// Forget deletes the record of key under consumer, so that the next
// delivery of that key runs its handler again: an operator's deliberate
// re-run of one message. The effect is applied again by that delivery;
// Forget does not undo it. A key that is not recorded returns an error
// wrapping [ErrNotRecorded] and changes nothing.
//
// Forget is exact on every layout. It runs in one transaction that, on
// PostgreSQL's bucketed layout, takes the key's lock that Process takes, and
// on SQLite holds the write lock; a delivery of the key racing with it is
// either a duplicate (it ran first) or applies once after it. A lookup
// filter that still holds the key only makes the next delivery look it up
// exactly. On SQLite a key in an immutable run is deleted from the run,
// which is renamed for its new key count in the same transaction.
func (in *Inbox) Forget(ctx context.Context, consumer, key string) error {
	return in.keyTx(ctx, consumer, key, func(tx *sql.Tx) (func(), error) {
		return in.forgetTx(ctx, tx, consumer, key)
	})
}

// keyTx checks (consumer, key) and runs f in a transaction, retried like
// Process's, committed when f succeeds; then f's after (if any) runs.
func (in *Inbox) keyTx(ctx context.Context, consumer, key string, f func(tx *sql.Tx) (after func(), err error)) error {
	if err := idem.ValidateKey(consumer); err != nil {
		return fmt.Errorf("inbox: consumer name: %w", err)
	}
	if err := idem.ValidateKey(key); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	return in.withRetry(ctx, func() error {
		tx, err := in.begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		after, err := f(tx)
		if err != nil {
			return err
		}
		if err := in.commit(ctx, tx, key); err != nil {
			return err
		}
		if after != nil {
			after()
		}
		return nil
	})
}

// find looks the key up in every table that may hold it.
func (in *Inbox) find(ctx context.Context, tx *sql.Tx, consumer, key string) (Record, error) {
	rec := Record{Consumer: consumer, Key: key, Layout: LayoutRows}
	b := in.bl.Load()
	if b != nil {
		rec.Layout, rec.BucketWidth = LayoutBuckets, time.Duration(b.width)*time.Second
		d := b.param(b.digest(consumer, key))
		starts, _ := b.snapshot()
		for _, s := range slices.Backward(starts) {
			ok, err := in.bucketRow(ctx, tx, bucketName(b.table, s), d, &rec.Fingerprint)
			if err != nil {
				return rec, err
			}
			if ok {
				rec.Table, rec.Bucket = bucketName(b.table, s), time.Unix(s, 0).UTC()
				return rec, nil
			}
		}
		if b.runs != nil {
			if err := in.syncRuns(ctx, tx, b); err != nil {
				return rec, err
			}
			for s, list := range b.runList() {
				for _, r := range list {
					name := runName(b.table, s, r)
					ok, err := in.bucketRow(ctx, tx, name, d, &rec.Fingerprint)
					if err != nil {
						return rec, err
					}
					if ok {
						rec.Table, rec.Run, rec.Bucket = name, true, time.Unix(s, 0).UTC()
						return rec, nil
					}
				}
			}
		}
		if !b.legacy.Load() {
			return rec, in.notRecorded(consumer, key)
		}
	}
	// The rows layout, or the rows table a migration froze.
	var us int64
	err := tx.QueryRowContext(ctx, in.rowsLookupSQL(), consumer, key).Scan(&rec.Fingerprint, &us)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, in.notRecorded(consumer, key)
	}
	if err != nil {
		return rec, fmt.Errorf("inbox: look up key: %w", err)
	}
	rec.Table, rec.RecordedAt = in.cfg.table, time.UnixMicro(us).UTC()
	if b != nil {
		// In the frozen rows table, the bucketed layout's Record is the
		// rows layout's.
		rec.Layout, rec.BucketWidth = LayoutRows, 0
	}
	return rec, nil
}

func (in *Inbox) notRecorded(consumer, key string) error {
	return fmt.Errorf("inbox: key %q of consumer %q: %w", key, consumer, ErrNotRecorded)
}

// bucketRow reads the fingerprint of digest d in a bucket or run table.
func (in *Inbox) bucketRow(ctx context.Context, tx *sql.Tx, table string, d any, f *[]byte) (bool, error) {
	q := `SELECT fingerprint FROM ` + table + ` WHERE d = ` + in.dialect.Placeholder(1)
	if in.dialect == sqldialect.Postgres {
		q += `::uuid`
	}
	err := tx.QueryRowContext(ctx, q, d).Scan(f)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, in.bucketStatementError(ctx, err)
	}
	return true, nil
}

// rowsLookupSQL reads a rows-layout key's fingerprint and time (Unix µs).
func (in *Inbox) rowsLookupSQL() string {
	t := in.cfg.table
	switch in.dialect {
	case sqldialect.Postgres:
		return `SELECT fingerprint, (extract(epoch FROM processed_at) * 1000000)::bigint FROM ` + t + ` WHERE consumer = $1 AND idem_key = $2`
	case sqldialect.MySQL:
		return `SELECT fingerprint, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', processed_at) FROM ` + t + ` WHERE consumer = ? AND idem_key = ?`
	}
	return `SELECT fingerprint, processed_at * 1000 FROM ` + t + ` WHERE consumer = ? AND idem_key = ?`
}

// forgetTx deletes the key from the table find reports, after taking the
// locks a concurrent Process of the key takes.
func (in *Inbox) forgetTx(ctx context.Context, tx *sql.Tx, consumer, key string) (func(), error) {
	b := in.bl.Load()
	if b != nil {
		switch in.dialect {
		case sqldialect.Postgres:
			if err := in.lockDigests(ctx, tx, [][16]byte{b.digest(consumer, key)}); err != nil {
				return nil, err
			}
		case sqldialect.SQLite:
			// A write first: the write lock, so the run list read next
			// is the latest and stays so.
			if _, err := tx.ExecContext(ctx, `UPDATE `+b.meta+` SET value = value WHERE name = 'salt'`); err != nil {
				return nil, fmt.Errorf("inbox: forget: %w", err)
			}
		}
	}
	rec, err := in.find(ctx, tx, consumer, key)
	if err != nil {
		return nil, err
	}
	if rec.Run {
		return in.forgetInRun(ctx, tx, b, rec)
	}
	var res sql.Result
	if b != nil && rec.Layout == LayoutBuckets {
		q := `DELETE FROM ` + rec.Table + ` WHERE d = ` + in.dialect.Placeholder(1)
		if in.dialect == sqldialect.Postgres {
			q += `::uuid`
		}
		res, err = tx.ExecContext(ctx, q, b.param(b.digest(consumer, key)))
	} else {
		res, err = tx.ExecContext(ctx, `DELETE FROM `+in.cfg.table+` WHERE consumer = `+in.dialect.Placeholder(1)+` AND idem_key = `+in.dialect.Placeholder(2), consumer, key)
	}
	if err != nil {
		return nil, in.bucketStatementError(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return nil, fmt.Errorf("inbox: forget key %q: %d rows deleted from %s, want 1: %w", key, n, rec.Table, errors.Join(err, errBucketsChanged))
	}
	return nil, nil
}

// forgetInRun deletes the key from its run and renames the run for its new
// key count (dropping it when empty), raising the run list's version: a
// run's name must count its keys, for merges and for other processes'
// filters (which re-read a run they have not accounted for).
func (in *Inbox) forgetInRun(ctx context.Context, tx *sql.Tx, b *buckets, rec Record) (func(), error) {
	s := rec.Bucket.Unix()
	rs := b.runs
	rs.mu.Lock()
	v, list := rs.version+1, slices.Clone(rs.runs[s])
	rs.mu.Unlock()
	i := slices.IndexFunc(list, func(r run) bool { return runName(b.table, s, r) == rec.Table })
	if i < 0 {
		return nil, errBucketsChanged // the list changed since find: rerun
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM `+rec.Table+` WHERE d = ?`, b.param(b.digest(rec.Consumer, rec.Key)))
	if err != nil {
		return nil, in.bucketStatementError(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return nil, fmt.Errorf("inbox: forget key %q: %d rows deleted from %s, want 1: %w", rec.Key, n, rec.Table, errors.Join(err, errBucketsChanged))
	}
	r := list[i]
	r.n--
	if r.n == 0 {
		_, err = tx.ExecContext(ctx, `DROP TABLE `+rec.Table)
		list = slices.Delete(list, i, i+1)
	} else {
		_, err = tx.ExecContext(ctx, `ALTER TABLE `+rec.Table+` RENAME TO `+runName(b.table, s, r))
		list[i] = r
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: forget: rewrite run %s: %w", rec.Table, err)
	}
	if err := setRunVersion(ctx, tx, b.meta, v); err != nil {
		return nil, fmt.Errorf("inbox: forget: %w", err)
	}
	// After the commit: the filter keeps the key (a false "maybe",
	// resolved by the lookup) and the list is the new one.
	return func() {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if rs.version == v-1 {
			runs := maps(rs.runs)
			if len(list) == 0 {
				delete(runs, s)
			} else {
				runs[s] = list
			}
			rs.runs, rs.version = runs, v
		}
	}, nil
}

// runList returns the cached run lists by bucket (replaced, never changed
// in place, so it may be read after the lock is released).
func (b *buckets) runList() map[int64][]run {
	b.runs.mu.Lock()
	defer b.runs.mu.Unlock()
	return b.runs.runs
}
