package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/sqldialect"
)

// WithReplicationCheck has [Inbox.Migrate] read how the database
// acknowledges a COMMIT relative to its standbys
// ([sqldialect.CheckReplication]) and pass what it found to f, once per
// Migrate. A non-empty r.Hazards means a failover can lose messages the
// consumer already acknowledged (docs/ha.md says what to run instead); f
// decides whether to log, alert or refuse to start. If the check itself
// fails (a role that may not read the settings), f gets a Replication
// whose only hazard says so; Migrate does not fail for it.
//
// Without this option Migrate still runs the check when the
// [WithLogger] logger is enabled at Warn, and logs each hazard there.
func WithReplicationCheck(f func(r sqldialect.Replication)) Option {
	return option.Check("inbox", f != nil, func(c *config) { c.replication = f }, "nil replication check")
}

// checkReplication is Migrate's last step: report the replication hazards
// to WithReplicationCheck's function and to the logger.
func (in *Inbox) checkReplication(ctx context.Context) {
	log := in.cfg.logger.Enabled(ctx, slog.LevelWarn)
	if in.cfg.replication == nil && !log {
		return
	}
	var r sqldialect.Replication
	err := in.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = sqldialect.CheckReplication(ctx, tx, in.dialect)
		return err
	})
	if err != nil {
		r.Hazards = []string{fmt.Sprintf("could not check replication: %v", err)}
	}
	for _, h := range r.Hazards {
		in.cfg.logger.WarnContext(ctx, "inbox: replication: a failover can lose acknowledged messages", "consumer", in.consumer, "hazard", h)
	}
	if in.cfg.replication != nil {
		in.cfg.replication(r)
	}
}

// errGaleraBuckets refuses the bucketed layout on a Galera cluster.
//
// The bucketed layout catches a key recorded concurrently in another
// bucket (two deliveries straddling a bucket boundary) with InnoDB gap
// locks: a locking read of the absent key in the other bucket blocks the
// other transaction's insert there (bucketmysql.go). Galera certifies the
// rows a transaction writes, not the ranges it read: row and gap locks are
// local to a node. Two transactions on two nodes, each reading the other's
// bucket and inserting into its own, write two different rows (two tables),
// both certify and both commit: the message is applied twice. The rows
// layout has one row per key, whose primary key Galera certifies: of two
// nodes recording the same key, one fails at COMMIT with 1213, is retried,
// and finds the key.
var errGaleraBuckets = errors.New("the bucketed layout relies on InnoDB gap locks, which Galera does not replicate (two nodes could record one key in two buckets): on Galera use the rows layout, inbox.WithLayout(inbox.LayoutRows), with a table of its own")

// mysqlGalera reports whether the MySQL-family server behind q is a Galera
// node with replication on (wsrep_on). SHOW VARIABLES answers no row on
// servers without the variable (MySQL).
func mysqlGalera(ctx context.Context, q querier) (bool, error) {
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

// refuseGalera is Migrate's first step on MySQL: on a Galera node, a table
// that does not exist yet is not created in the bucketed layout.
func (in *Inbox) refuseGalera(ctx context.Context) error {
	if in.dialect != sqldialect.MySQL || in.cfg.layout != LayoutBuckets {
		return nil
	}
	var galera, rows bool
	err := in.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if galera, err = mysqlGalera(ctx, tx); err != nil || !galera {
			return err
		}
		rows, err = tableExists(ctx, tx, in.dialect, in.cfg.table)
		return err
	})
	if err != nil {
		if m := in.mismatch(ctx, err); m != nil {
			return m
		}
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	if galera && !rows { // an existing rows table keeps its layout
		return fmt.Errorf("inbox: migrate: %w: table %s: %w", ErrUnsafeTable, in.cfg.table, errGaleraBuckets)
	}
	return nil
}
