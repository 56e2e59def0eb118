package bucketmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/internal/digest"
	"github.com/idem-go/idem/sqldialect"
)

// Freeze is MigrateLayout's first step on MySQL, where every DDL
// statement commits by itself, so the order does the work of PostgreSQL's
// one transaction: first the trigger that refuses inserts into the rows
// table (CREATE TRIGGER takes the table's exclusive metadata lock, so it
// waits for every transaction that inserted there), then the meta table,
// filled under another name and renamed into place in one atomic step. An
// Inbox that sees the meta table therefore finds the rows table frozen and
// every key in it committed. A crash between the steps leaves the rows
// table frozen without a meta table: Inbox values retry, and MigrateLayout
// run again completes it.
func Freeze(ctx context.Context, tx *sql.Tx, h *engine.Host) error {
	t := h.Table
	ok, err := bucket.MySQLTriggerExists(ctx, tx, t)
	if err != nil {
		return fmt.Errorf("inbox: migrate layout: %w", err)
	}
	if !ok {
		q := `CREATE TRIGGER ` + bucket.MySQLFrozenTrigger(t) + ` BEFORE INSERT ON ` + t + ` FOR EACH ROW SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = ` +
			strconv.Itoa(engine.MySQLFrozenErrno) + `, MESSAGE_TEXT = 'inbox: table ` + t + ` was migrated to the bucketed layout: upgrade idem'`
		if _, err := tx.ExecContext(ctx, q); err != nil && sqldialect.MySQLErrorNumber(err) != 1359 { // 1359: it exists
			return fmt.Errorf("inbox: migrate layout: %w", err)
		}
	}
	m := bucket.MetaName(t)
	tmp := m + "_new"
	salt := digest.NewSalt()
	stmts := append([]string{`DROP TABLE IF EXISTS ` + tmp}, bucket.MySQLSchema(tmp, salt, strconv.FormatInt(int64(h.Width/time.Second), 10))...)
	stmts = append(stmts,
		`INSERT INTO `+tmp+` (name, value) VALUES ('migrated_us', CAST(`+engine.MySQLNowUS+` AS CHAR))`,
		`RENAME TABLE `+tmp+` TO `+m)
	return engine.ExecCommit(ctx, tx, "migrate layout", stmts)
}

// retire is Sweep on MySQL, where DROP TABLE commits
// by itself: the horizon, the clock and the bucket list are read in one
// short transaction, and each table is then dropped by a statement of its
// own, never inside a transaction that records keys. Time only moves on
// between the two, so a bucket old enough when read is old enough when
// dropped.
func (e *Engine) retire(ctx context.Context, olderThan time.Duration) (int, error) {
	b := e.b
	var drop []string
	err := e.h.Retry(ctx, func() error {
		drop = drop[:0]
		return e.h.ReadTx(ctx, func(tx *sql.Tx) error {
			expired, limit, err := b.Expired(ctx, tx, olderThan)
			if err != nil {
				return err
			}
			for _, s := range expired {
				drop = append(drop, bucket.Name(e.b.Table, s))
			}
			old, err := b.LegacyExpired(ctx, tx, limit)
			if old {
				drop = append(drop, e.b.Table)
			}
			return err
		})
	})
	if err != nil || len(drop) == 0 {
		return 0, err
	}
	// Dropped oldest first, so a failure leaves only younger tables.
	dropped := 0
	err = e.h.ReadTx(ctx, func(tx *sql.Tx) error {
		return bucket.WithLockWait(ctx, tx, "lock_wait_timeout", func() error {
			for _, name := range drop {
				if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+name); err != nil {
					return fmt.Errorf("inbox: sweep: drop %s (a transaction held it for %d s; the next sweep tries again): %w", name, bucket.DropLockWait, err)
				}
				dropped++
			}
			return nil
		})
	})
	if dropped > 0 {
		e.h.Unready() // other Inbox values find out from their next statement's error
	}
	return dropped, err
}

// MidMigration returns engine.ErrLayoutChanged (retried) when the rows table
// is frozen but the meta table is not there yet: MigrateLayout is between
// its two steps (see Freeze), for milliseconds unless it died there.
func MidMigration(ctx context.Context, tx *sql.Tx, t string) error {
	ok, err := bucket.MySQLTriggerExists(ctx, tx, t)
	if err != nil || !ok {
		return err
	}
	return fmt.Errorf("inbox: table %s is frozen but has no meta table (%s) yet: MigrateLayout is under way, or died midway (run it again): %w", t, bucket.MetaName(t), engine.ErrLayoutChanged)
}

// ErrGaleraBuckets refuses the bucketed layout on a Galera cluster.
//
// The bucketed layout catches a key recorded concurrently in another
// bucket (two deliveries straddling a bucket boundary) with InnoDB gap
// locks: a locking read of the absent key in the other bucket blocks the
// other transaction's insert there (insert.go). Galera certifies the
// rows a transaction writes, not the ranges it read: row and gap locks are
// local to a node. Two transactions on two nodes, each reading the other's
// bucket and inserting into its own, write two different rows (two tables),
// both certify and both commit: the message is applied twice. The rows
// layout has one row per key, whose primary key Galera certifies: of two
// nodes recording the same key, one fails at COMMIT with 1213, is retried,
// and finds the key.
var ErrGaleraBuckets = errors.New("the bucketed layout relies on InnoDB gap locks, which Galera does not replicate (two nodes could record one key in two buckets): on Galera use the rows layout, inbox.WithLayout(inbox.LayoutRows), with a table of its own")

// Galera reports whether the MySQL-family server behind q is a Galera
// node with replication on (wsrep_on). SHOW VARIABLES answers no row on
// servers without the variable (MySQL).
func Galera(ctx context.Context, q engine.Querier) (bool, error) {
	rows, err := q.QueryContext(ctx, `SHOW VARIABLES LIKE 'wsrep_on'`)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	on := false
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return false, err
		}
		on = strings.EqualFold(value, "ON")
	}
	return on, rows.Err()
}
