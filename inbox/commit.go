package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idem-go/idem/sqldialect"
)

// A COMMIT that the caller's cancellation interrupts can answer success
// for a transaction that is not safe to acknowledge. On PostgreSQL with a
// synchronous standby, a COMMIT waiting for the standby that is cancelled
// (a driver sending a cancel request when ctx ends, pgx's
// CancelRequestContextWatcherHandler or lib/pq; an administrator's
// pg_cancel_backend; statement_timeout) commits locally and answers
// success with only a WARNING ("canceling wait for synchronous
// replication ... might not have been replicated to the standby"), and a
// failover then loses a message the consumer acknowledged (issue 29,
// finding 2: 137-241 in 2 runs). Other drivers drop the connection and
// answer an error: an unknown outcome, as it should be.
//
// So the inbox's transactions that decide an acknowledgement begin under
// context.WithoutCancel(ctx): database/sql hands that context to the
// driver for COMMIT, which the caller's cancellation or deadline then
// cannot interrupt. The statements inside still run under ctx (a
// cancellation before COMMIT rolls back), and commit checks ctx first, so
// a transaction whose caller has gone is rolled back, not committed. A
// COMMIT waits as long as the database makes it wait (a synchronous
// standby that is down blocks every writer until it returns or is
// dropped from synchronous_standby_names): that is PostgreSQL's guarantee,
// and cutting it short is exactly what may lose the message.
//
// statement_timeout applies to COMMIT too and is not the client's: leave it
// 0 for the inbox's sessions under synchronous replication (CheckReplication
// reports it).

// beginDetached begins a transaction whose COMMIT is not interrupted by
// ctx's cancellation (see above).
func (in *Inbox) beginDetached(ctx context.Context) (*sql.Tx, error) {
	tx, err := in.db.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return nil, fmt.Errorf("inbox: begin: %w", err)
	}
	return tx, nil
}

// commit commits tx, begun by beginDetached, unless ctx has ended (then it
// rolls back: nothing is recorded). A failed COMMIT is a *CommitError: the
// outcome is unknown. With WithWaitReplicas it then waits for the
// standbys (waitreplicas.go); a wait that fails is a *CommitError too.
func (in *Inbox) commit(ctx context.Context, tx *sql.Tx, key string) error {
	if err := ctx.Err(); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("inbox: %s: rolled back before COMMIT: %w", key, err)
	}
	var mark sqldialect.CommitMark
	if in.cfg.wait.Standbys > 0 {
		var err error
		if mark, err = sqldialect.MarkCommit(ctx, tx); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("inbox: %s: %w", key, err) // before COMMIT: nothing recorded
		}
	}
	if err := tx.Commit(); err != nil {
		return &CommitError{Key: key, Err: err}
	}
	if in.cfg.wait.Standbys > 0 {
		if err := in.waitReplicas(ctx, mark); err != nil {
			return &CommitError{Key: key, Err: err}
		}
	}
	return nil
}

// rolledBack reports whether a failed COMMIT certainly rolled back, so
// that the transaction may run again: a deadlock at COMMIT on MySQL (1213,
// which is how Galera reports a certification failure: another node's
// conflicting write won, and this transaction was rolled back on every
// node) and a serialization failure or deadlock at COMMIT on PostgreSQL
// (40001, 40P01: a SERIALIZABLE transaction's conflict found at commit).
// Any other COMMIT error (a broken connection, a timeout; SQLITE_BUSY, after
// which the transaction is still open) leaves the outcome unknown.
func rolledBack(d sqldialect.Dialect, ce *CommitError) bool {
	switch d {
	case sqldialect.MySQL:
		return sqldialect.MySQLErrorNumber(ce.Err) == 1213
	case sqldialect.Postgres:
		return d.Retryable(ce.Err)
	}
	return false
}
