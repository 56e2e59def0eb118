package bucketsql

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/sqldialect"
)

// Packing sealed buckets (PostgreSQL). Random keys split B-tree leaves in
// the middle, so a bucket's primary-key index ends about 70% full: 40 of
// the 85 bytes a key of a bucket filled with UUIDv4 keys. A sealed bucket
// never changes again (package bucket), so Sweep rebuilds its index once, full
// (fillfactor 100), with REINDEX CONCURRENTLY: writers and lookups go on
// against the old index while the new one is built, and the swap waits for
// the transactions that use the old one. A bucket that is packed carries a
// comment on its index; one whose rebuild failed (a lock wait timed out, the
// process died) keeps an invalid copy of the index, which the next Sweep
// drops before it tries again. The bucket list accepts the extra unique
// index on (d) that exists while a rebuild runs (package bucket).

// packedComment marks a packed bucket's index.
const packedComment = "idem: packed"

// packAfter is how many widths after its start a bucket is packed: one
// width after it sealed, when every running process has read its lookup
// filter (a filter's barrier waits behind a rebuild, and retries later).
const packAfter = 3

// Pack packs each sealed bucket not packed yet (PostgreSQL; a no-op
// elsewhere), and returns how many it packed. It runs outside any
// transaction (REINDEX CONCURRENTLY cannot run in one), on one connection
// of the pool.
func (e *Engine) Pack(ctx context.Context) (int, error) {
	b := e.b
	if e.b.D != sqldialect.Postgres || e.h.NoPack {
		return 0, nil
	}
	starts, _ := b.Snapshot()
	now := b.NowS()
	var todo []int64
	for _, s := range starts {
		if s+packAfter*b.Width <= now {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	pool, ok := e.h.DB.(interface {
		Conn(context.Context) (*sql.Conn, error)
	})
	if !ok {
		return 0, nil // a Beginner that is not a pool (*sql.DB): no connection outside a transaction
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox: pack buckets: %w", err)
	}
	defer conn.Close()
	// A rebuild waits for the transactions that use the old index; bound
	// the wait, and try again at the next Sweep.
	if _, err := conn.ExecContext(ctx, `SET lock_timeout = '10s'`); err != nil {
		return 0, fmt.Errorf("inbox: pack buckets: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `RESET lock_timeout`) //nolint:errcheck // the connection goes back to the pool either way
	packed := 0
	for _, s := range todo {
		ok, err := packBucket(ctx, conn, bucket.Name(e.b.Table, s))
		if err != nil {
			return packed, fmt.Errorf("inbox: pack bucket %s: %w", bucket.Name(e.b.Table, s), err)
		}
		if ok {
			packed++
			e.h.Logger.DebugContext(ctx, "inbox: bucket packed", "bucket", bucket.Name(e.b.Table, s))
		}
	}
	return packed, nil
}

// packBucket packs one bucket's primary-key index unless it is packed (or
// the bucket is gone); it reports whether it packed it.
func packBucket(ctx context.Context, conn *sql.Conn, table string) (bool, error) {
	var index sql.NullString
	var comment sql.NullString
	err := conn.QueryRowContext(ctx, `SELECT i.indexrelid::regclass::text, obj_description(i.indexrelid, 'pg_class')
FROM pg_index i WHERE i.indrelid = to_regclass($1) AND i.indisprimary`, table).Scan(&index, &comment)
	if err == sql.ErrNoRows {
		return false, nil // dropped meanwhile
	}
	if err != nil {
		return false, err
	}
	if comment.String == packedComment {
		return false, nil
	}
	// One packer a bucket: another process's Sweep packing it now would
	// make this rebuild wait on its lock, then rebuild it again.
	var mine bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(hashtextextended('idem pack ' || $1, 0))`, table).Scan(&mine); err != nil {
		return false, err
	}
	if !mine {
		return false, nil
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended('idem pack ' || $1, 0))`, table) //nolint:errcheck // a lost unlock ends with the session
	// Read again under the lock: the other packer may have finished.
	if err := conn.QueryRowContext(ctx, `SELECT obj_description(i.indexrelid, 'pg_class') FROM pg_index i WHERE i.indrelid = to_regclass($1) AND i.indisprimary`, table).Scan(&comment); err == sql.ErrNoRows {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if comment.String == packedComment {
		return false, nil
	}
	// The leftovers of a rebuild that failed: invalid, and never used.
	rows, err := conn.QueryContext(ctx, `SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = to_regclass($1) AND NOT indisvalid`, table)
	if err != nil {
		return false, err
	}
	var stale []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return false, err
		}
		stale = append(stale, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, n := range stale {
		if _, err := conn.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+n); err != nil {
			return false, err
		}
	}
	for _, q := range []string{
		`ALTER INDEX ` + index.String + ` SET (fillfactor = 100)`,
		`REINDEX INDEX CONCURRENTLY ` + index.String,
		`COMMENT ON INDEX ` + index.String + ` IS '` + packedComment + `'`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return false, err
		}
	}
	return true, nil
}
