package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/sqldialect"
)

// Tests of what is MySQL's own in the bucketed layout (package internal/engine/bucketmysql);
// the layout's shared tests (bucket_test.go) run on MySQL too.

func mysqlBackend(t *testing.T) backend {
	for _, b := range backends {
		if b.d == sqldialect.MySQL && b.opts == nil {
			return b
		}
	}
	t.Fatal("no mysql backend")
	return backend{}
}

// TestBucketMySQLIsolation: without gap locks (READ COMMITTED, READ
// UNCOMMITTED) two deliveries straddling a bucket boundary could both
// commit, so the layout refuses those levels before recording anything;
// REPEATABLE READ (the default) and SERIALIZABLE work.
func TestBucketMySQLIsolation(t *testing.T) {
	e := setup(t, mysqlBackend(t))
	ctx := context.Background()
	for _, level := range []string{"READ COMMITTED", "READ UNCOMMITTED", "SERIALIZABLE"} {
		conn, err := e.db2.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL "+level); err != nil {
			t.Fatal(err)
		}
		in, _ := inbox.New(conn, e.d, "wallet-consumer")
		ok, err := in.Process(ctx, "k", e.credit(1, 1))
		if level != "SERIALIZABLE" {
			if !errors.Is(err, inbox.ErrUnsafeTable) || !strings.Contains(err.Error(), "REPEATABLE READ") || ok {
				t.Fatalf("%s: applied=%v err=%v; want a refusal", level, ok, err)
			}
			if e.balance(1) != 0 || e.keys() != 0 {
				t.Fatalf("%s: something was recorded", level)
			}
		} else {
			if !ok || err != nil {
				t.Fatalf("%s: applied=%v err=%v", level, ok, err)
			}
			if ok, err := in.Process(ctx, "k", e.credit(1, 1)); ok || err != nil {
				t.Fatalf("%s duplicate: applied=%v err=%v", level, ok, err)
			}
		}
		conn.Close()
	}
	e.wantBalance(1, 1)
}

// TestBucketMySQLFreezeResumed: MySQL commits each DDL statement alone,
// so MigrateLayout freezes the rows table before the meta table appears.
// A process that dies in between leaves the table frozen without buckets:
// deliveries fail (nothing is applied, nothing is acknowledged) and
// MigrateLayout run again completes the migration, after which the keys
// of the rows table are still duplicates.
func TestBucketMySQLFreezeResumed(t *testing.T) {
	b := mysqlBackend(t)
	e := setup(t, b, inbox.WithLayout(inbox.LayoutRows))
	ctx := context.Background()
	if ok, err := e.in.Process(ctx, "before", e.credit(1, 1)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	var warmRetried atomic.Int32
	warm, _ := inbox.New(e.db2, e.d, "wallet-consumer", inbox.WithRetry(2, time.Millisecond, 2*time.Millisecond), inbox.WithHooks(retryCounter{&warmRetried}))
	if ok, err := warm.Process(ctx, "warm", e.credit(2, 1)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// The first step alone, as mysqlFreeze runs it (its error number).
	if _, err := e.db.Exec("CREATE TRIGGER idem_inbox_frozen BEFORE INSERT ON idem_inbox FOR EACH ROW SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 31401, MESSAGE_TEXT = 'frozen'"); err != nil {
		t.Fatal(err)
	}
	// A new Inbox's first use verifies the table, with its budget of
	// reruns, and fails; one in use fails at its insert, which marks it
	// unready, and each rerun verifies the table again in one try: the
	// delivery's reruns are its whole budget (each rerun had a budget of
	// its own inside it: 6 reruns for a budget of 2, 120 for the default
	// 10).
	var retried atomic.Int32
	quick, _ := inbox.New(e.db2, e.d, "wallet-consumer", inbox.WithRetry(2, time.Millisecond, 2*time.Millisecond), inbox.WithHooks(retryCounter{&retried}))
	if ok, err := quick.Process(ctx, "during", e.credit(1, 10)); ok || err == nil {
		t.Fatalf("delivery into a half-migrated table: applied=%v err=%v", ok, err)
	}
	if n := retried.Load(); n != 2 {
		t.Errorf("a delivery with a budget of 2 reruns was rerun %d times", n)
	}
	if ok, err := warm.Process(ctx, "during", e.credit(1, 10)); ok || err == nil {
		t.Fatalf("delivery into a half-migrated table: applied=%v err=%v", ok, err)
	}
	if n := warmRetried.Load(); n != 2 {
		t.Errorf("a delivery (of a used Inbox) with a budget of 2 reruns was rerun %d times", n)
	}
	if ok, err := e.in.Process(ctx, "during", e.credit(1, 10)); ok || err == nil {
		t.Fatalf("delivery by an Inbox that had the rows layout: applied=%v err=%v", ok, err)
	}
	mig, _ := inbox.New(e.db, e.d, "wallet-consumer")
	if err := mig.MigrateLayout(ctx); err != nil {
		t.Fatal(err)
	}
	for _, in := range []*inbox.Inbox{quick, e.in} {
		if ok, err := in.Process(ctx, "before", e.credit(1, 100)); ok || err != nil {
			t.Fatalf("pre-migration key after the migration: applied=%v err=%v", ok, err)
		}
		if _, err := in.Process(ctx, "during", e.credit(1, 10)); err != nil {
			t.Fatal(err)
		}
	}
	e.wantBalance(1, 11)
}

// TestBucketMySQLCrossBucketDeadlock forces the interleaving the gap locks
// exist for: another transaction (standing in for an Inbox one bucket
// ahead) holds a gap lock where this Inbox inserts the key, and then
// inserts the same digest into the bucket this Inbox has just looked the
// key up in. Without the lookup's gap lock both would commit: two records
// of one key in two buckets, the effect applied by each. With it InnoDB
// finds a deadlock and rolls one back; the Inbox's retry, if it lost,
// finds the other's committed key. Exactly one of them commits the key.
func TestBucketMySQLCrossBucketDeadlock(t *testing.T) {
	e := setup(t, mysqlBackend(t), inbox.WithBucketWidth(time.Hour))
	ctx := context.Background()
	var retried atomic.Int32
	in, _ := inbox.New(e.db, e.d, "wallet-consumer", inbox.WithHooks(retryCounter{&retried}))
	if _, err := in.Process(ctx, "warm", func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	tables := dbtest.Strings(t, e.db, bucketTablesSQL(e.d, "idem_inbox")+" ORDER BY 1")
	if len(tables) < 2 {
		t.Fatalf("buckets %v", tables)
	}
	cur, next := tables[0], tables[1] // the Inbox's bucket, and the one after
	d := inbox.Digest(in, "k")
	other, err := e.db2.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	var n int
	if err := other.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+cur+" WHERE d = ? LOCK IN SHARE MODE", d).Scan(&n); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	done := make(chan bool)
	go func() {
		ok, err := in.Process(ctx, "k", e.credit(1, 1))
		if err != nil {
			t.Error(err)
		}
		done <- ok
	}()
	time.Sleep(500 * time.Millisecond) // the Inbox looked "k" up in next and waits to insert into cur
	_, ierr := other.ExecContext(ctx, "INSERT INTO "+next+" (d) VALUES (?)", d)
	committed := false
	if ierr == nil {
		committed = other.Commit() == nil
	}
	applied := <-done
	t.Logf("other transaction: insert err %v, committed %v; the Inbox applied %v after %d retries", ierr, committed, applied, retried.Load())
	if applied == committed {
		t.Fatalf("the Inbox applied %v and the other transaction committed %v: want exactly one", applied, committed)
	}
	if ierr == nil && retried.Load() == 0 {
		t.Fatal("the Inbox was not rolled back, yet the other transaction inserted: no deadlock was found")
	}
	if want := map[bool]int64{true: 1, false: 0}[applied]; e.balance(1) != want {
		t.Fatalf("balance %d, want %d", e.balance(1), want)
	}
}

type retryCounter struct{ n *atomic.Int32 }

func (retryCounter) Processed(string, bool, error, time.Duration) {}
func (r retryCounter) Retried(string, int, error)                 { r.n.Add(1) }
func (retryCounter) Swept(string, int)                            {}
func (retryCounter) Batch(string, int, time.Duration)             {}
