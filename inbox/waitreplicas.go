package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idem-go/idem/internal/replicas"
	"github.com/idem-go/idem/sqldialect"
)

// WithWaitReplicas makes every decision the inbox reports wait, after
// COMMIT, until n streaming standbys have flushed the commit's WAL, for at
// most timeout (PostgreSQL only; [New] refuses it on other engines). It is
// for teams that must run asynchronous replication: with it, a message is
// acknowledged only when a standby that a failover may promote has its
// key and effect ([sqldialect.ReplicaWait] says how it polls).
//
// A wait that times out (or whose caller's ctx ends, or whose poll reaches
// another server) returns a [*CommitError] wrapping
// [sqldialect.ErrNotReplicated]: outcome unknown, do not acknowledge. That
// is the truth: the key and the effect committed on the primary, but a
// failover now would lose them. The message is redelivered; if the commit
// survived (no failover, or the standby caught up) the redelivery finds
// the key and is a duplicate; if a failover lost it, the key went with the
// effect and the redelivery applies it once on the new primary. Either
// way nothing is acknowledged and lost, and nothing is applied twice.
//
// A duplicate waits too: the key it found may be an earlier attempt's
// commit that the standbys do not have yet (that attempt's wait timed
// out), and acknowledging the duplicate would lose the message just the
// same. Each Process, ProcessBatch and Forget pays one more round trip
// before COMMIT and one or more polls of pg_stat_replication after it
// (docs/ha.md has the measured cost); the role needs pg_monitor.
//
// Prefer synchronous replication (synchronous_standby_names with
// synchronous_commit=on) when the database can be configured: it waits
// in the server, for every client.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return replicas.WaitOption("inbox", n, timeout, func(c *config) *sqldialect.ReplicaWait { return &c.wait })
}

// WithWaitReplicasApplied, with [WithWaitReplicas], waits for the
// standbys' replay_lsn instead of flush_lsn: the commit is visible to
// queries on the standby, not only durable there. It costs the standby's
// replay on top of its fsync.
func WithWaitReplicasApplied() Option {
	return func(c *config) error { c.wait.Applied = true; return nil }
}

// waitReplicas waits for the standbys of the server marked by m (see
// WithWaitReplicas), polling on the pool when the Inbox's Beginner can run
// a query itself, in a read transaction otherwise.
func (in *Inbox) waitReplicas(ctx context.Context, m sqldialect.CommitMark) error {
	if q, ok := in.db.(sqldialect.RowQuerier); ok {
		return in.cfg.wait.Wait(ctx, q, m)
	}
	var werr error
	err := in.readTx(ctx, func(tx *sql.Tx) error {
		werr = in.cfg.wait.Wait(ctx, tx, m)
		return nil
	})
	if werr == nil && err != nil {
		werr = fmt.Errorf("%w: %v", sqldialect.ErrNotReplicated, err)
	}
	return werr
}
