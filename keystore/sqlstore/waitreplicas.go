package sqlstore

import (
	"context"
	"errors"
	"time"

	"github.com/idem-go/idem/internal/replicas"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// WithWaitReplicas makes every write (Reserve, Complete, Release, Extend,
// Forget) wait, after its COMMIT, until n streaming standbys have flushed
// the commit's WAL, for at most timeout (PostgreSQL only: [New] refuses it
// on SQLite). Named after redisstore's WithWaitReplicas, with the same
// meaning, for teams that must run asynchronous replication:
// [sqldialect.ReplicaWait] says how it polls. Each write then runs in a
// transaction of its own (BEGIN, the statement, one query noting the
// server, COMMIT) followed by polls of pg_stat_replication; the role needs
// pg_monitor. The caller's ctx is not looked at once the write started:
// the wait ends when the standbys confirm or timeout passes, and the whole
// call, wait included, within [keystore.CallTimeout] (10 s).
//
// A write that fewer than n standbys confirmed in time returns an error
// wrapping [sqldialect.ErrNotReplicated]: it happened on the primary, and
// a failover now would lose it. What that leaves:
//
//   - Reserve: the store releases the lease at once (best effort, not
//     waited for) and returns the error, so nobody runs the effect and a
//     retry finds the key free (or, if that release was lost, in progress
//     until the lease ends).
//   - Complete: the result is on the primary; Complete again with the same
//     claim to find out (nil once the standbys have it). If a standby
//     without it is promoted, the key is back in progress under the old
//     lease, is taken over when it ends, and the effect runs again, as
//     after a crash before Complete.
//   - Release: the key is free on the primary; after a failover the lease
//     may be back, and expires.
//
// Tokens need no wait: they never repeat or go backwards through a
// failover that loses commits (docs/ha.md, the bound).
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return replicas.WaitOption("sqlstore", n, timeout, func(c *config) *sqldialect.ReplicaWait { return &c.wait })
}

// doWaited runs fn in a transaction on PostgreSQL, commits it and waits
// for the standbys (WithWaitReplicas). dctx is already detached from the
// caller.
func (s *Store) doWaited(dctx context.Context, fn func(context.Context, runner) error) error {
	tx, err := s.db.BeginTx(dctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // no-op after Commit
	if err := fn(dctx, runner{s: s, tx: tx}); err != nil {
		return err
	}
	mark, err := sqldialect.MarkCommit(dctx, tx)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err // outcome unknown, as for a statement whose connection broke
	}
	return s.wait.Wait(dctx, s.db, mark)
}

// releaseUnreplicated gives back a lease that Reserve took but the
// standbys did not confirm (WithWaitReplicas): its caller gets an error
// and will not run the effect. Best effort, not waited for.
func (s *Store) releaseUnreplicated(ctx context.Context, l *layout, key string, token int64) {
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	_, _ = runner{s: s}.exec(dctx, l.q.release, s.args(l, key, token)...)
}

// notReplicated reports whether err is a write the standbys did not confirm.
func notReplicated(err error) bool { return errors.Is(err, sqldialect.ErrNotReplicated) }
