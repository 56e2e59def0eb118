package ddl_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/ddl"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sequence"
	"github.com/idem-go/idem/sqldialect"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// migration is one Migrate of an idem package, on db in dialect d.
type migration struct {
	name string
	on   []sqldialect.Dialect
	run  func(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error
}

var migrations = []migration{
	{"inbox (buckets)", []sqldialect.Dialect{sqldialect.SQLite, sqldialect.Postgres, sqldialect.MySQL}, func(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
		in, err := inbox.New(db, d, "c")
		if err != nil {
			return err
		}
		return in.Migrate(ctx)
	}},
	{"inbox (rows)", []sqldialect.Dialect{sqldialect.SQLite, sqldialect.Postgres, sqldialect.MySQL}, func(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
		in, err := inbox.New(db, d, "c", inbox.WithTable("rows_inbox"), inbox.WithLayout(inbox.LayoutRows))
		if err != nil {
			return err
		}
		return in.Migrate(ctx)
	}},
	{"sqlstore", []sqldialect.Dialect{sqldialect.SQLite, sqldialect.Postgres}, func(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
		s, err := sqlstore.New(db, d)
		if err != nil {
			return err
		}
		return s.Migrate(ctx)
	}},
	{"outbox", []sqldialect.Dialect{sqldialect.SQLite, sqldialect.Postgres}, func(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
		o, err := outbox.New(d)
		if err != nil {
			return err
		}
		return o.Migrate(ctx, db)
	}},
	{"sequence marks", []sqldialect.Dialect{sqldialect.SQLite, sqldialect.Postgres, sqldialect.MySQL}, func(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
		m, err := sequence.NewSQLMarks(d, "c")
		if err != nil {
			return err
		}
		return m.Migrate(ctx, db)
	}},
}

// TestMigrateConcurrently: the replicas of a service start together and
// each migrates every table it uses. On PostgreSQL two concurrent CREATE …
// IF NOT EXISTS of one name failed the second (a unique violation on
// pg_type, duplicate_table or duplicate_object: most rounds of six at once
// failed an inbox or outbox Migrate before the schema lock); every Migrate
// must succeed, on a fresh database each round.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	const rounds, procs = 5, 6
	for _, db := range []dbtest.DB{dbtest.SQLite, dbtest.Postgres, dbtest.MySQL} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			for r := range rounds {
				conn := db.Open(t)
				var wg sync.WaitGroup
				for p := range procs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for _, m := range migrations {
							if !contains(m.on, db.D) {
								continue
							}
							if err := m.run(ctx, conn, db.D); err != nil {
								t.Errorf("round %d, process %d: %s: Migrate: %v", r, p, m.name, err)
							}
						}
					}()
				}
				wg.Wait()
			}
		})
	}
}

func contains(ds []sqldialect.Dialect, d sqldialect.Dialect) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

// TestExecInCallersTransaction: given a *sql.Tx, Exec runs in it (the lock
// too), so the caller's rollback undoes the statements.
func TestExecInCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, db := range []dbtest.DB{dbtest.SQLite, dbtest.Postgres} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			conn := db.Open(t)
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := ddl.Exec(ctx, tx, db.D, "made_in_tx", []string{"CREATE TABLE made_in_tx (a INTEGER)"}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "SELECT a FROM made_in_tx"); err == nil {
				t.Fatal("the table outlived the caller's rollback")
			}
			if err := ddl.Exec(ctx, conn, db.D, "made", []string{"CREATE TABLE made (a INTEGER)", "INSERT INTO made VALUES (1)"}); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM made").Scan(&n); err != nil || n != 1 {
				t.Fatalf("after Exec on the pool: %d rows (%v), want 1", n, err)
			}
		})
	}
}

// TestLostCreateRace: what PostgreSQL answers the loser of two unlocked
// concurrent creates is recognised, and nothing else is.
func TestLostCreateRace(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{"23505": true, "42P07": true, "42710": true, "40001": false, "42601": false} {
		err := fmt.Errorf("wrapped: %w", sqlState(code))
		if got := ddl.LostCreateRace(sqldialect.Postgres, err); got != want {
			t.Errorf("SQLSTATE %s: %v, want %v", code, got, want)
		}
		if ddl.LostCreateRace(sqldialect.SQLite, err) {
			t.Errorf("SQLSTATE %s on SQLite: a lost race", code)
		}
	}
}

type sqlState string

func (s sqlState) Error() string    { return "SQLSTATE " + string(s) }
func (s sqlState) SQLState() string { return string(s) }

// TestLockIsPerTable: a schema change of one table that holds its lock
// (sqlstore's MigrateLayout copies every row under its own) does not hold
// up another table's (an inbox creating its next bucket), while a second
// change of the same table waits for the first to commit.
func TestLockIsPerTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Postgres.Open(t)
	held, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := ddl.Lock(ctx, held, sqldialect.Postgres, "a"); err != nil {
		t.Fatal(err)
	}
	if err := ddl.Exec(ctx, db, sqldialect.Postgres, "b", []string{"CREATE TABLE IF NOT EXISTS b (x INTEGER)"}); err != nil {
		t.Fatalf("another table's change while a's lock is held: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- ddl.Exec(ctx, db, sqldialect.Postgres, "a", []string{"CREATE TABLE IF NOT EXISTS a (x INTEGER)"})
	}()
	// The second change of a waits: the lock shows in pg_locks as not
	// granted until the holder commits.
	testenv.WaitFor(t, time.Minute, "the second change of a waits for the lock", func() bool {
		var waiting int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
	AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('idem ddl a', 0)`).Scan(&waiting)
		return err == nil && waiting > 0
	})
	select {
	case err := <-done:
		t.Fatalf("the second change of a ran while the first held the lock: %v", err)
	default:
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the second change of a after the first committed: %v", err)
	}
}
