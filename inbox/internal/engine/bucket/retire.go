package bucket

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/sqldialect"
)

// skewMargin is added to a bucket's age before it may be dropped: writers
// choose a bucket from their local clock corrected by an offset to the
// database clock measured at most clockSyncEvery ago.
const skewMargin = 2 * time.Second

// Verify checks the bucket tables and, after a migration, that the
// rows table is frozen.
func (b *State) Verify(ctx context.Context, tx *sql.Tx) error {
	starts, err := b.List(ctx, tx)
	if err != nil {
		return err
	}
	b.SetStarts(starts)
	if !b.Legacy.Load() {
		return nil
	}
	var n int
	switch b.D {
	case sqldialect.Postgres:
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1::text) AND tgname = $2 AND tgenabled <> 'D'`, b.Table, engine.FrozenName(b.Table)).Scan(&n)
	case sqldialect.SQLite:
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND name = ?`, b.Table, engine.FrozenName(b.Table)).Scan(&n)
	case sqldialect.MySQL:
		var ok bool
		ok, err = MySQLTriggerExists(ctx, tx, b.Table)
		if ok {
			n = 1
		}
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("inbox: table %s (rows layout) and %s (bucketed layout) both exist, but the rows table is not frozen: an Inbox of an earlier release would record keys there that the bucketed layout never writes; run MigrateLayout: %w", b.Table, b.Meta, engine.ErrUnsafeTable)
	}
	return nil
}

// Expired checks olderThan against the recorded horizons
// (Horizon.CheckTable) and lists, inside tx, the buckets whose newest
// possible key is older than olderThan (plus skewMargin) by the database's
// clock, oldest first; it returns that limit in Unix µs.
func (b *State) Expired(ctx context.Context, tx *sql.Tx, olderThan time.Duration) ([]int64, int64, error) {
	if err := b.h.Horizon.CheckTable(ctx, tx, olderThan); err != nil {
		return nil, 0, err
	}
	var nowUS int64
	if err := tx.QueryRowContext(ctx, `SELECT `+engine.DBNowUS(b.D)).Scan(&nowUS); err != nil {
		return nil, 0, fmt.Errorf("inbox: sweep: %w", err)
	}
	starts, err := b.List(ctx, tx)
	if err != nil {
		return nil, 0, fmt.Errorf("inbox: sweep: %w", err)
	}
	limit := nowUS - (olderThan + skewMargin).Microseconds()
	var expired []int64
	for _, s := range starts {
		if (s+b.Width)*1e6 > limit {
			break // ascending: the rest are younger
		}
		expired = append(expired, s)
	}
	return expired, limit, nil
}

// LegacyExpired reports whether a migrated rows table exists and its
// migration is older than limit (Unix µs).
func (b *State) LegacyExpired(ctx context.Context, tx *sql.Tx, limit int64) (bool, error) {
	if !b.Legacy.Load() {
		return false, nil
	}
	var v []byte
	err := tx.QueryRowContext(ctx, `SELECT value FROM `+b.Meta+` WHERE name = 'migrated_us'`).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("inbox: sweep: %w", err)
	}
	m, perr := strconv.ParseInt(string(v), 10, 64)
	return perr == nil && m <= limit, nil
}

// DropLockWait bounds, in seconds, how long dropping a bucket (on MySQL
// and PostgreSQL) and reading a lookup filter (MySQL) wait for
// transactions holding the bucket: while a DROP waits for its lock, new
// statements naming the table queue behind it, and every delivery names
// every live bucket.
const DropLockWait = 2

// MySQLSealBarrier waits, inside tx, for the transactions that inserted
// into bucket name and may still be open: a locking read of every row
// waits for each uncommitted one (and its gap locks keep the bucket as it
// is until tx ends).
func MySQLSealBarrier(ctx context.Context, tx *sql.Tx, name string) error {
	return WithLockWait(ctx, tx, "innodb_lock_wait_timeout", func() error {
		var n int
		return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+name+` LOCK IN SHARE MODE`).Scan(&n)
	})
}

// WithLockWait runs f with the session variable v (a lock wait timeout)
// set to DropLockWait seconds, and restores it.
func WithLockWait(ctx context.Context, tx *sql.Tx, v string, f func() error) error {
	var old int64
	if err := tx.QueryRowContext(ctx, `SELECT @@SESSION.`+v).Scan(&old); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `SET SESSION `+v+` = `+strconv.Itoa(DropLockWait)); err != nil {
		return err
	}
	err := f()
	if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), `SET SESSION `+v+` = `+strconv.FormatInt(old, 10)); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// MySQLFrozenTrigger is the trigger's qualified name (a trigger lives in
// its table's schema).
func MySQLFrozenTrigger(t string) string {
	schema, _ := engine.SplitTable(t)
	if schema == "" {
		return engine.FrozenName(t)
	}
	return schema + "." + engine.FrozenName(t)
}

// MySQLTriggerExists reports whether the rows table t carries the
// trigger that freezes it.
func MySQLTriggerExists(ctx context.Context, q engine.Querier, t string) (bool, error) {
	schema, name := engine.MySQLSchemaArg(t)
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = COALESCE(?, DATABASE()) AND EVENT_OBJECT_TABLE = ? AND TRIGGER_NAME = ?`, schema, name, engine.FrozenName(t)).Scan(&n)
	return n > 0, err
}

// InList is "(?,?,…)" with n placeholders.
func InList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?,", n), ",") + ")"
}
