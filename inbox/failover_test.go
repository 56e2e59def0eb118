package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// cancellingDB opens url with a pgx that sends PostgreSQL a cancel request
// when a context ends (as lib/pq does, and pgx when configured so), instead
// of closing the connection.
func cancellingDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 5 * time.Second}
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// A COMMIT waits for the synchronous standby, which does not answer
// (replication held); the caller's context ends 300 ms into it; the primary
// dies and the standby is promoted. If Process reported the message applied
// (the consumer acknowledges it), the new primary must have it. Before the
// fix the cancel reached PostgreSQL, which committed locally and answered
// success with a WARNING: the message was acknowledged and lost (issue 29,
// finding 2).
func TestFailoverCancelledSyncCommit(t *testing.T) {
	t.Parallel()
	h := testenv.StartPGHA(t, testenv.PGSync)
	db := cancellingDB(t, h.URL())
	ctx := context.Background()
	in := inboxtest.Migrated(t, db, sqldialect.Postgres, "c")
	if _, err := db.Exec(`CREATE TABLE effects (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	h.HoldReplication()
	type result struct {
		applied bool
		err     error
	}
	done := make(chan result, 1)
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	go func() {
		applied, err := in.Process(pctx, "m1", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES ('m1')`)
			return err
		})
		done <- result{applied, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(1500 * time.Millisecond): // still waiting for the standby
	}
	h.KillPrimary()
	h.Promote()
	if r == (result{}) {
		r = <-done
	}
	t.Logf("Process: applied %v, err %v", r.applied, r.err)
	var n int
	err := poll(func() error { return db.QueryRow(`SELECT count(*) FROM effects`).Scan(&n) })
	if err != nil {
		t.Fatal(err)
	}
	if r.err == nil && r.applied && n == 0 {
		t.Fatal("Process reported the message applied (a consumer acknowledges it), and the new primary does not have it: lost")
	}
}

// poll retries f for 30 s: the pool's connections to the killed primary
// fail once each.
func poll(f func() error) error { return testenv.Poll(30*time.Second, 50*time.Millisecond, f) }
