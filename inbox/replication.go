package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucketmysql"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/internal/replicas"
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
		r = replicas.Check(ctx, tx, in.dialect)
		return nil
	})
	if err != nil && len(r.Hazards) == 0 { // BEGIN or COMMIT failed
		r.Hazards = []string{fmt.Sprintf("could not check replication: %v", err)}
	}
	for _, h := range r.Hazards {
		in.cfg.logger.WarnContext(ctx, "inbox: replication: a failover can lose acknowledged messages", "consumer", in.consumer, "hazard", h)
	}
	if in.cfg.replication != nil {
		in.cfg.replication(r)
	}
}

// refuseGalera is Migrate's first step on MySQL: on a Galera node, a table
// that does not exist yet is not created in the bucketed layout.
func (in *Inbox) refuseGalera(ctx context.Context) error {
	if in.dialect != sqldialect.MySQL || in.cfg.layout != LayoutBuckets {
		return nil
	}
	var galera, rows bool
	err := in.h.ReadOnlyTx(ctx, func(tx *sql.Tx) error {
		var err error
		if galera, err = bucketmysql.Galera(ctx, tx); err != nil || !galera {
			return err
		}
		rows, err = engine.TableExists(ctx, tx, in.dialect, in.cfg.table)
		return err
	})
	if err != nil {
		if m := in.mismatch(ctx, err); m != nil {
			return m
		}
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	if galera && !rows { // an existing rows table keeps its layout
		return fmt.Errorf("inbox: migrate: %w: table %s: %w", ErrUnsafeTable, in.cfg.table, bucketmysql.ErrGaleraBuckets)
	}
	return nil
}
