package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/internal/retry"
)

// ErrNotReplicated is wrapped by the error of a write that committed on the
// PostgreSQL primary but that fewer standbys than [ReplicaWait.Standbys]
// confirmed within [ReplicaWait.Timeout]. The commit happened locally; a
// failover to a standby that lacks it loses it. Its outcome is therefore
// unknown to whoever must decide on it (an acknowledgement, a key reported
// done): treat it as unknown, not as success and not as failure.
var ErrNotReplicated = errors.New("sqldialect: commit not confirmed by enough standbys")

// ReplicaWait makes a commit on PostgreSQL wait until Standbys streaming
// standbys have the commit's WAL, for at most Timeout: the client-side
// equivalent of a synchronous standby, for teams that must run
// asynchronous replication (Redis's WAIT, redisstore's WithWaitReplicas).
// The inbox's and sqlstore's WithWaitReplicas options use it.
//
// How: inside the transaction, before COMMIT, [MarkCommit] notes which
// server it runs on; after COMMIT, [ReplicaWait.Wait] reads the server's
// WAL flush position (at or past the end of the commit record, which
// COMMIT flushed before it returned and before the transaction became
// visible to others) and polls pg_stat_replication, with backoff, until
// Standbys of its rows show a flush_lsn (replay_lsn with Applied) at or
// past it. A standby's flush_lsn is what it has fsynced: promoted, it has
// the commit. (Not the insert position: records inserted after the commit
// and not flushed yet, a row lock of another session's open transaction,
// may stay unflushed, and so unsent, while nothing else commits.)
//
// So the session must flush its commits: synchronous_commit on (the
// default), local, remote_write or remote_apply. With off, a COMMIT
// returns before its record is flushed, and every wait fails at once,
// naming the setting.
//
// It needs the role to see pg_stat_replication's positions (superuser or
// pg_monitor); without them every wait fails at once, naming the grant.
// Logical replication walsenders (a CDC connector) appear in
// pg_stat_replication too and are counted like standbys: name the
// physical standbys you count on with Standbys accordingly.
type ReplicaWait struct {
	// Standbys is how many standbys must confirm; 0 turns waiting off.
	Standbys int
	// Timeout bounds one wait.
	Timeout time.Duration
	// Applied waits for replay_lsn (the commit is visible to queries on
	// the standby) instead of flush_lsn (it is durable there).
	Applied bool
}

// Validate reports a ReplicaWait that cannot be met: a negative count, or
// a count without a timeout of at least a millisecond.
func (w ReplicaWait) Validate() error {
	if w.Standbys < 0 || (w.Standbys > 0 && w.Timeout < time.Millisecond) {
		return fmt.Errorf("wait for %d standbys with timeout %v: want n ≥ 0 and a timeout of at least 1ms", w.Standbys, w.Timeout)
	}
	return nil
}

// CommitMark says which server a transaction ran on (its postmaster's
// start time, address and port), so that a wait after COMMIT, which runs
// on whatever connection the pool lends, is known to ask the same server.
type CommitMark struct{ server, syncCommit string }

const pgServer = `pg_postmaster_start_time()::text || ' ' || coalesce(host(inet_server_addr()), 'local') || ':' || coalesce(inet_server_port(), 0)::text`

// MarkCommit notes the server behind q, a PostgreSQL transaction about to
// commit. One round trip.
func MarkCommit(ctx context.Context, q RowQuerier) (CommitMark, error) {
	var m CommitMark
	if err := q.QueryRowContext(ctx, `SELECT `+pgServer+`, current_setting('synchronous_commit')`).Scan(&m.server, &m.syncCommit); err != nil {
		return m, fmt.Errorf("sqldialect: mark commit: %w", err)
	}
	return m, nil
}

// waitBackoff spaces the polls of pg_stat_replication: a standby on a
// local network flushes within a millisecond or two of the primary.
var waitBackoff = retry.Backoff{Min: 500 * time.Microsecond, Max: 20 * time.Millisecond}

// Wait waits until w.Standbys standbys of the server marked by m have
// every WAL record it had flushed when Wait began, which includes the
// commit of the transaction m was taken in (and every commit visible to
// it). It returns nil, or an error
// wrapping [ErrNotReplicated] when the timeout passed, ctx ended, the
// connection failed, q reached another server (a failover in between), or
// the positions are hidden from the role. q is a pool (*sql.DB) or
// anything that runs a query on the marked server's cluster.
func (w ReplicaWait) Wait(ctx context.Context, q RowQuerier, m CommitMark) error {
	if w.Standbys <= 0 {
		return nil
	}
	if m.syncCommit == "off" {
		return fmt.Errorf("%w: synchronous_commit=off: a COMMIT returns before its WAL is flushed, so there is no position to wait for; set synchronous_commit to on or local for these sessions", ErrNotReplicated)
	}
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	col := "flush_lsn"
	if w.Applied {
		col = "replay_lsn"
	}
	// The first poll reads the position too; later ones compare with it.
	first := `WITH w AS (SELECT pg_current_wal_flush_lsn() AS lsn)
SELECT ` + pgServer + `, w.lsn::text,
	(SELECT count(*) FROM pg_stat_replication r WHERE r.` + col + ` >= w.lsn),
	(SELECT count(*) FROM pg_stat_replication r WHERE r.state IS NULL)
FROM w`
	next := `SELECT ` + pgServer + `, $1::text,
	(SELECT count(*) FROM pg_stat_replication r WHERE r.` + col + ` >= $1::pg_lsn),
	(SELECT count(*) FROM pg_stat_replication r WHERE r.state IS NULL)`
	var (
		lsn        string
		got, have  int
		server     string
		start      = time.Now()
		args       []any
		query      = first
		lastErr    error
		lastHidden int
	)
	for attempt := 0; ; attempt++ {
		err := q.QueryRowContext(ctx, query, args...).Scan(&server, &lsn, &got, &lastHidden)
		switch {
		case err != nil:
			lastErr = err
		case server != m.server:
			return fmt.Errorf("%w: the wait reached server %s, the commit ran on %s (a failover in between?)", ErrNotReplicated, server, m.server)
		case got >= w.Standbys:
			return nil
		case lastHidden > 0:
			return fmt.Errorf("%w: %d walsenders in pg_stat_replication are hidden from this role: grant it pg_monitor", ErrNotReplicated, lastHidden)
		default:
			have, lastErr = got, nil
			query, args = next, []any{lsn}
		}
		if err != nil && query == first {
			// Without the position there is nothing to wait for: a
			// failed first read is the connection's or the server's.
			return fmt.Errorf("%w: read WAL position: %v", ErrNotReplicated, err)
		}
		if serr := waitBackoff.Wait(ctx, attempt); serr != nil {
			if lastErr != nil {
				return fmt.Errorf("%w: %d of %d standbys have %s %s after %v (last poll: %v)", ErrNotReplicated, have, w.Standbys, col, lsn, time.Since(start).Round(time.Millisecond), lastErr)
			}
			return fmt.Errorf("%w: %d of %d standbys have %s %s after %v: %v", ErrNotReplicated, have, w.Standbys, col, lsn, time.Since(start).Round(time.Millisecond), serr)
		}
	}
}
