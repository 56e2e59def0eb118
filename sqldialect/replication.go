package sqldialect

import (
	"context"
	"fmt"
	"strings"
)

// Replication is what [CheckReplication] found about how the database
// acknowledges a COMMIT relative to its standbys.
type Replication struct {
	// Standby is true when the server is itself a standby (read-only).
	Standby bool
	// SynchronousCommit and SynchronousStandbyNames are PostgreSQL's
	// settings of the session.
	SynchronousCommit, SynchronousStandbyNames string
	// StatementTimeout is the session's statement_timeout ("0": none).
	StatementTimeout string
	// Standbys is the number of streaming standbys the server shows
	// (pg_stat_replication; -1 when the role may not see them), Sync of
	// them synchronous or quorum.
	Standbys, Sync int
	// Galera is true on a MariaDB/MySQL Galera node (wsrep_on).
	Galera bool
	// Hazards says, one sentence each, how an acknowledged commit can be
	// lost or reported wrongly in a failover. Empty: none found.
	Hazards []string
}

// CheckReplication reads whether the database behind q acknowledges a
// COMMIT before a standby has it, so that a failover to that standby loses
// commits the application already acted on: an inbox acknowledged the
// message (it is not redelivered: lost), a key store reported a key done
// (it runs again). Call it at start-up and log its Hazards. It only reads.
//
// PostgreSQL: asynchronous standbys (the default) lose what was not
// shipped; synchronous_commit=on (or remote_apply) with the standbys in
// synchronous_standby_names does not. A statement_timeout applies to
// COMMIT, and one that fires while COMMIT waits for a synchronous standby
// answers success with only a WARNING: the commit may not be on the
// standby. MySQL/MariaDB: asynchronous replicas lose what was not shipped
// (semi-synchronous replication with AFTER_SYNC does not; Galera
// certifies on every node before COMMIT returns). SQLite has no standby;
// a file copied asynchronously (Litestream, a volume snapshot) loses its
// tail the same way.
func CheckReplication(ctx context.Context, q RowQuerier, d Dialect) (Replication, error) {
	var r Replication
	switch d {
	case Postgres:
		var hidden int
		err := q.QueryRowContext(ctx, `SELECT pg_is_in_recovery(), current_setting('synchronous_commit'),
	current_setting('synchronous_standby_names'), current_setting('statement_timeout'),
	(SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'),
	(SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')),
	(SELECT count(*) FROM pg_stat_replication WHERE state IS NULL)`).
			Scan(&r.Standby, &r.SynchronousCommit, &r.SynchronousStandbyNames, &r.StatementTimeout, &r.Standbys, &r.Sync, &hidden)
		if err != nil {
			return r, fmt.Errorf("sqldialect: check replication: %w", err)
		}
		if hidden > 0 { // rows of walsenders this role may not read
			r.Standbys, r.Sync = -1, -1
		}
		r.Hazards = pgHazards(r)
	case MySQL:
		var wsrep string
		if err := q.QueryRowContext(ctx, `SELECT COALESCE((SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME = 'WSREP_ON'), 'OFF')`).Scan(&wsrep); err != nil {
			return r, fmt.Errorf("sqldialect: check replication: %w", err)
		}
		r.Galera, r.Standbys = strings.EqualFold(wsrep, "ON"), -1
		if !r.Galera {
			r.Hazards = append(r.Hazards, "MySQL/MariaDB: replicas, if any, receive commits asynchronously unless semi-synchronous replication (AFTER_SYNC) is on: a failover to one can lose acknowledged commits")
		}
	case SQLite:
	default:
		return r, fmt.Errorf("sqldialect: check replication: %w", d.Validate())
	}
	return r, nil
}

func pgHazards(r Replication) []string {
	var h []string
	local := r.SynchronousCommit == "off" || r.SynchronousCommit == "local"
	switch {
	case r.Standby:
		h = append(h, "PostgreSQL: this server is a standby (pg_is_in_recovery): writes fail here")
	case r.Standbys > r.Sync:
		h = append(h, fmt.Sprintf("PostgreSQL: %d of %d streaming standbys are asynchronous: COMMIT returns before they have it, and a failover to one loses the commits it had not received (acknowledged messages lost, completed keys run again); name them in synchronous_standby_names with synchronous_commit=on or remote_apply, or keep the broker's position in the same database as the effect (idemkafka.OffsetConsumer)", r.Standbys-r.Sync, r.Standbys))
	case r.Standbys < 0:
		h = append(h, "PostgreSQL: pg_stat_replication is not visible to this role (grant pg_monitor): standbys unknown")
	}
	if r.SynchronousStandbyNames != "" && local {
		h = append(h, "PostgreSQL: synchronous_commit="+r.SynchronousCommit+" does not wait for the synchronous standbys: a failover loses acknowledged commits")
	}
	if r.SynchronousStandbyNames != "" && r.StatementTimeout != "0" {
		h = append(h, "PostgreSQL: statement_timeout="+r.StatementTimeout+" applies to COMMIT: one that fires while COMMIT waits for the synchronous standby answers success with only a WARNING, and the commit may not be on the standby; set statement_timeout=0 for these sessions")
	}
	return h
}
