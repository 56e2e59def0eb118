package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idem-go/idem/sqldialect"
)

// defaultWidth is the bucket width of a new table: a quarter of the
// retention (or horizon), so that about six buckets are live (each new key
// is looked up in every one: the scale curve in docs/inbox.md measures
// that cost against the bucket count) and a key outlives its retention by
// at most a quarter; at least a minute.
func defaultWidth(c config) time.Duration {
	r := max(c.retention, c.horizon)
	if r <= 0 {
		return 24 * time.Hour
	}
	w := (r / 4).Truncate(time.Second)
	return max(w, time.Minute)
}

// skewMargin is added to a bucket's age before it may be dropped: writers
// choose a bucket from their local clock corrected by an offset to the
// database clock measured at most clockSyncEvery ago.
const skewMargin = 2 * time.Second

// frozenState is the SQLSTATE (PostgreSQL) the frozen rows table raises.
const frozenState = "IDM01"

// isFrozen reports whether err is the frozen rows table's refusal.
func isFrozen(d sqldialect.Dialect, err error) bool {
	switch d {
	case sqldialect.Postgres:
		var e interface{ SQLState() string }
		return errors.As(err, &e) && e.SQLState() == frozenState
	case sqldialect.SQLite:
		var e interface{ Code() int }
		return errors.As(err, &e) && e.Code() == 1811 // SQLITE_CONSTRAINT_TRIGGER
	case sqldialect.MySQL:
		return sqldialect.MySQLErrorNumber(err) == mysqlFrozenErrno
	}
	return false
}

// verifyBuckets checks the bucket tables and, after a migration, that the
// rows table is frozen.
func (in *Inbox) verifyBuckets(ctx context.Context, tx *sql.Tx, b *buckets) error {
	starts, err := b.list(ctx, tx)
	if err != nil {
		return err
	}
	b.setStarts(starts)
	if !b.legacy.Load() {
		return nil
	}
	var n int
	switch in.dialect {
	case sqldialect.Postgres:
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1::text) AND tgname = $2 AND tgenabled <> 'D'`, in.cfg.table, frozenName(in.cfg.table)).Scan(&n)
	case sqldialect.SQLite:
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND name = ?`, in.cfg.table, frozenName(in.cfg.table)).Scan(&n)
	case sqldialect.MySQL:
		var ok bool
		ok, err = mysqlTriggerExists(ctx, tx, in.cfg.table)
		if ok {
			n = 1
		}
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("inbox: table %s (rows layout) and %s (bucketed layout) both exist, but the rows table is not frozen: an Inbox of an earlier release would record keys there that the bucketed layout never writes; run MigrateLayout: %w", in.cfg.table, b.meta, ErrUnsafeTable)
	}
	return nil
}

// MigrateLayout moves a table of the rows layout (made by a release before
// issue 14) to the bucketed layout, with deliveries running and without a
// window in which a duplicate can be applied:
//
//  1. In one transaction it creates the meta table and a BEFORE INSERT
//     trigger on the rows table that refuses every insert. The trigger
//     waits for transactions that are inserting into the rows table (its
//     lock conflicts with theirs), so every key recorded there is
//     committed before the first key is recorded in a bucket.
//  2. From then on, Inbox values of this release record keys in buckets
//     and look every key up in the rows table too (dual read); one that
//     still had the rows layout cached gets the trigger's refusal, reads
//     the new layout and reruns the transaction. An Inbox of an earlier
//     release gets the refusal as an error: its message is not
//     acknowledged and is redelivered (and its Verify refuses the frozen
//     table from then on).
//  3. [Inbox.Sweep] drops the rows table once the migration is older than
//     the sweep's age (which the recorded horizon bounds), with the
//     buckets that expired.
//
// If the process dies before step 1 commits, nothing changed; after, the
// migration is complete. Calling it on a table already migrated, or on a
// new table, does nothing.
func (in *Inbox) MigrateLayout(ctx context.Context) error {
	t := in.cfg.table
	err := in.withRetry(ctx, func() error {
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: migrate layout: begin: %w", err)
		}
		defer tx.Rollback()
		rows, err := tableExists(ctx, tx, in.dialect, t)
		if err != nil {
			return fmt.Errorf("inbox: migrate layout: %w", err)
		}
		meta, err := tableExists(ctx, tx, in.dialect, metaTableName(t))
		if err != nil {
			return fmt.Errorf("inbox: migrate layout: %w", err)
		}
		if meta || !rows {
			return nil
		}
		if in.dialect == sqldialect.MySQL {
			return in.mysqlFreeze(ctx, tx)
		}
		stmts := bucketSchema(in.dialect, t, in.cfg.width)
		fz := frozenName(t)
		switch in.dialect {
		case sqldialect.Postgres:
			fn := t + "_frozen"
			stmts = append(stmts,
				`CREATE OR REPLACE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION USING ERRCODE = '`+frozenState+`', MESSAGE = 'inbox: table `+t+` was migrated to the bucketed layout: upgrade idem'; END $f$`,
				`CREATE TRIGGER `+fz+` BEFORE INSERT ON `+t+` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`,
				`INSERT INTO `+metaTableName(t)+` (name, value) VALUES ('migrated_us', convert_to((`+dbNowUS(in.dialect)+`)::text, 'UTF8'))`)
		case sqldialect.SQLite:
			stmts = append(stmts,
				`CREATE TRIGGER `+fz+` BEFORE INSERT ON `+t+` BEGIN SELECT RAISE(ABORT, 'inbox: table `+t+` was migrated to the bucketed layout: upgrade idem'); END`,
				`INSERT INTO `+metaTableName(t)+` (name, value) VALUES ('migrated_us', CAST(`+dbNowUS(in.dialect)+` AS TEXT))`)
		}
		return execCommit(ctx, tx, "migrate layout", stmts)
	})
	if err != nil {
		return err
	}
	in.isReady.Store(false)
	return in.prepare(ctx)
}

// checkTableHorizon returns ErrHorizon when olderThan is below the largest
// horizon any consumer of the table recorded (a bucket holds every
// consumer's keys).
func (in *Inbox) checkTableHorizon(ctx context.Context, tx *sql.Tx, olderThan time.Duration) error {
	var us sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(horizon_us) FROM `+in.q.horizonTable).Scan(&us); err != nil {
		return fmt.Errorf("inbox: sweep: read the redelivery horizons from %s (apply SchemaSQL or call Migrate): %w", in.q.horizonTable, err)
	}
	if h := time.Duration(us.Int64) * time.Microsecond; olderThan < h {
		return fmt.Errorf("inbox: asked to delete keys older than %v, the largest horizon recorded in %s (bucket tables hold every consumer's keys) is %v: %w", olderThan, in.q.horizonTable, h, ErrHorizon)
	}
	return nil
}

// expiredBuckets checks olderThan against the recorded horizons
// (checkTableHorizon) and lists, inside tx, the buckets whose newest
// possible key is older than olderThan (plus skewMargin) by the database's
// clock, oldest first; it returns that limit in Unix µs.
func (in *Inbox) expiredBuckets(ctx context.Context, tx *sql.Tx, b *buckets, olderThan time.Duration) ([]int64, int64, error) {
	if err := in.checkTableHorizon(ctx, tx, olderThan); err != nil {
		return nil, 0, err
	}
	var nowUS int64
	if err := tx.QueryRowContext(ctx, `SELECT `+dbNowUS(in.dialect)).Scan(&nowUS); err != nil {
		return nil, 0, fmt.Errorf("inbox: sweep: %w", err)
	}
	starts, err := b.list(ctx, tx)
	if err != nil {
		return nil, 0, fmt.Errorf("inbox: sweep: %w", err)
	}
	limit := nowUS - (olderThan + skewMargin).Microseconds()
	var expired []int64
	for _, s := range starts {
		if (s+b.width)*1e6 > limit {
			break // ascending: the rest are younger
		}
		expired = append(expired, s)
	}
	return expired, limit, nil
}

// legacyExpired reports whether a migrated rows table exists and its
// migration is older than limit (Unix µs).
func (in *Inbox) legacyExpired(ctx context.Context, tx *sql.Tx, b *buckets, limit int64) (bool, error) {
	if !b.legacy.Load() {
		return false, nil
	}
	var v []byte
	err := tx.QueryRowContext(ctx, `SELECT value FROM `+b.meta+` WHERE name = 'migrated_us'`).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("inbox: sweep: %w", err)
	}
	m, perr := strconv.ParseInt(string(v), 10, 64)
	return perr == nil && m <= limit, nil
}

// retireBuckets is Sweep for the bucketed layout: in one transaction that
// reads the largest horizon recorded by any consumer of the table (a
// bucket holds every consumer's keys), it drops each bucket whose newest
// key is older than olderThan by the database's clock, and the frozen rows
// table once the migration is that old. It returns the number of tables
// dropped.
func (in *Inbox) retireBuckets(ctx context.Context, b *buckets, olderThan time.Duration) (int, error) {
	if in.dialect == sqldialect.MySQL {
		return in.mysqlRetireBuckets(ctx, b, olderThan)
	}
	var dropped int
	err := in.withRetry(ctx, func() error {
		dropped = 0
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("inbox: sweep: begin: %w", err)
		}
		defer tx.Rollback()
		expired, limit, err := in.expiredBuckets(ctx, tx, b, olderThan)
		if err != nil {
			return err
		}
		for _, s := range expired {
			if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+bucketName(in.cfg.table, s)); err != nil {
				return fmt.Errorf("inbox: sweep: drop %s: %w", bucketName(in.cfg.table, s), err)
			}
			if err := in.dropRuns(ctx, tx, b, s); err != nil {
				return fmt.Errorf("inbox: sweep: drop the runs of %s: %w", bucketName(in.cfg.table, s), err)
			}
			dropped++
		}
		if old, err := in.legacyExpired(ctx, tx, b, limit); err != nil {
			return err
		} else if old {
			if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+in.cfg.table); err != nil {
				return fmt.Errorf("inbox: sweep: drop the migrated rows table: %w", err)
			}
			dropped++
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, err
	}
	if dropped > 0 {
		// Other Inbox values find out from their next statement's error.
		in.isReady.Store(false)
	}
	return dropped, nil
}
