package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/app/demo"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashEnv) != "" {
		crashChild()
		return
	}
	os.Exit(testenv.Main(m))
}

// backend opens two independent pools on one fresh database, as two
// consumer processes would have.
type backend struct {
	name string
	d    sqldialect.Dialect
	open func(t *testing.T) (*sql.DB, *sql.DB)
	opts []inbox.Option // LayoutRows for the "-rows" variants
}

func openSQLite(t *testing.T) (*sql.DB, *sql.DB) {
	dsn := testenv.SQLiteDSN(t)
	return testenv.Open(t, "sqlite", dsn), testenv.Open(t, "sqlite", dsn)
}

func openPostgres(t *testing.T) (*sql.DB, *sql.DB) {
	u := testenv.PostgresURL(t)
	return testenv.Open(t, "pgx", u), testenv.Open(t, "pgx", u)
}

// The default layout of new tables (buckets) and the rows layout of
// earlier releases both run the whole suite.
var backends = []backend{
	{"sqlite", sqldialect.SQLite, openSQLite, nil},
	{"sqlite-rows", sqldialect.SQLite, openSQLite, []inbox.Option{inbox.WithLayout(inbox.LayoutRows)}},
	{"postgres", sqldialect.Postgres, openPostgres, nil},
	{"postgres-rows", sqldialect.Postgres, openPostgres, []inbox.Option{inbox.WithLayout(inbox.LayoutRows)}},
	{"mysql", sqldialect.MySQL, func(t *testing.T) (*sql.DB, *sql.DB) {
		dsn := testenv.MySQLDSN(t)
		return testenv.Open(t, "mysql", dsn), testenv.Open(t, "mysql", dsn)
	}, nil},
	{"mysql-rows", sqldialect.MySQL, func(t *testing.T) (*sql.DB, *sql.DB) {
		dsn := testenv.MySQLDSN(t)
		return testenv.Open(t, "mysql", dsn), testenv.Open(t, "mysql", dsn)
	}, []inbox.Option{inbox.WithLayout(inbox.LayoutRows)}},
}

// env is one test's database: an inbox, a wallet table to apply effects to.
type env struct {
	t        *testing.T
	d        sqldialect.Dialect
	db, db2  *sql.DB
	in       *inbox.Inbox
	bucketed bool
}

// manyReruns lets an Inbox rerun a transaction 100 times (default 10), for
// every Inbox of one-second buckets, whose list changes every second: a
// delivery is rerun when it crosses into a bucket not created yet, or its
// statement meets one just dropped, and at load 20 to 25 each of the
// default 10 reruns of a MySQL delivery (with its CREATE TABLE) took
// longer than a bucket (TestSweepWhileDelivering,
// TestBucketDuplicatesInManySealedBuckets; TestForgetSealedBucket's four
// concurrent redeliveries on SQLite at load 21). The default is sized for
// buckets of minutes.
var manyReruns = inbox.WithRetry(100, 2*time.Millisecond, 250*time.Millisecond)

func setup(t *testing.T, b backend, opts ...inbox.Option) *env {
	t.Helper()
	db, db2 := b.open(t)
	opts = append(append([]inbox.Option(nil), b.opts...), opts...)
	in := inboxtest.Migrated(t, db, b.d, "wallet-consumer", opts...)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE wallet (id INT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO wallet (id, balance) VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, d: b.d, db: db, db2: db2, in: in, bucketed: b.opts == nil}
}

// credit returns a handler that adds amount to wallet id.
func (e *env) credit(id int, amount int64) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE wallet SET balance = balance + "+e.d.Placeholder(1)+" WHERE id = "+e.d.Placeholder(2), amount, id)
		return err
	}
}

func (e *env) balance(id int) int64 {
	e.t.Helper()
	var b int64
	if err := e.db.QueryRow("SELECT balance FROM wallet WHERE id = "+e.d.Placeholder(1), id).Scan(&b); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// redeliverAfterFailure checks that a failed delivery of key (a credit of
// 50 to wallet 1) recorded neither its effect nor its key, then delivers it
// twice and checks that it applied once.
func (e *env) redeliverAfterFailure(ctx context.Context, failure, key string) {
	e.t.Helper()
	if e.balance(1) != 0 || e.keys() != 0 {
		e.t.Fatalf("after %s: balance=%d keys=%d, want both 0", failure, e.balance(1), e.keys())
	}
	for range 2 {
		if _, err := e.in.Process(ctx, key, e.credit(1, 50)); err != nil {
			e.t.Fatal(err)
		}
	}
	if got := e.balance(1); got != 50 {
		e.t.Fatalf("balance = %d after two redeliveries, want 50", got)
	}
}

// wantBalance fails the test unless wallet id holds want.
func (e *env) wantBalance(id int, want int64) {
	e.t.Helper()
	if got := e.balance(id); got != want {
		e.t.Fatalf("wallet %d: balance %d, want %d", id, got, want)
	}
}

func (e *env) keys() int {
	e.t.Helper()
	if e.bucketed {
		return bucketKeys(e.t, e.db, e.d, "idem_inbox")
	}
	var n int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM idem_inbox").Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// bucketKeys counts the keys in every bucket table of table.
func bucketKeys(t testing.TB, db *sql.DB, d sqldialect.Dialect, table string) int {
	t.Helper()
	total := 0
	for _, n := range dbtest.Strings(t, db, bucketTablesSQL(d, table)) {
		var c int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + n).Scan(&c); err != nil {
			t.Fatal(err)
		}
		total += c
	}
	return total
}

// bucketTablesSQL lists the bucket tables of table.
func bucketTablesSQL(d sqldialect.Dialect, table string) string {
	switch d {
	case sqldialect.Postgres:
		return "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename ~ '^" + table + "_k[0-9]+$'"
	case sqldialect.MySQL:
		return "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME REGEXP '^" + table + "_k[0-9]+$'"
	}
	return "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB '" + table + "_k[0-9]*'"
}

func forEach(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// forEachEnv runs f on a fresh env of every backend, with the default
// options.
func forEachEnv(t *testing.T, f func(t *testing.T, e *env, ctx context.Context)) {
	forEach(t, func(t *testing.T, b backend) { f(t, setup(t, b), context.Background()) })
}

func TestProcessAppliesOnce(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
		for i, want := range []bool{true, false, false} {
			applied, err := e.in.Process(ctx, "evt-1", e.credit(1, 50))
			if err != nil || applied != want {
				t.Fatalf("delivery %d: applied=%v err=%v, want applied=%v", i, applied, err, want)
			}
		}
		e.wantBalance(1, 50)
		// Keys compare byte for byte: a different case is a different key.
		if applied, err := e.in.Process(ctx, "EVT-1", e.credit(1, 1)); err != nil || !applied {
			t.Fatalf("EVT-1 treated as a duplicate of evt-1: applied=%v err=%v", applied, err)
		}
	})
}

func TestHandlerErrorRecordsNothing(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
		boom := errors.New("payment service said no")
		failing := func(ctx context.Context, tx *sql.Tx) error {
			if err := e.credit(1, 50)(ctx, tx); err != nil { // effect written, then failure
				return err
			}
			return boom
		}
		applied, err := e.in.Process(ctx, "evt-1", failing)
		var he *inbox.HandlerError
		if applied || !errors.Is(err, boom) || !errors.As(err, &he) || he.Key != "evt-1" {
			t.Fatalf("failing handler: applied=%v err=%v", applied, err)
		}
		// Nothing recorded; the redelivery is processed, exactly once.
		e.redeliverAfterFailure(ctx, "a failed handler", "evt-1")
	})
}

func TestConcurrentDeliveriesApplyOnce(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		in2, err := inbox.New(e.db2, b.d, "wallet-consumer") // a second "process"
		if err != nil {
			t.Fatal(err)
		}
		const n = 32
		applied, err := demo.Race(n, func(i int) (bool, error) {
			return []*inbox.Inbox{e.in, in2}[i%2].Process(context.Background(), "evt-race", e.credit(1, 50))
		})
		if err != nil {
			t.Errorf("delivery failed: %v", err)
		}
		if applied != 1 || e.balance(1) != 50 {
			t.Fatalf("%d concurrent deliveries: %d reported applied, balance %d; want 1 and 50", n, applied, e.balance(1))
		}
	})
}

func TestConnectionDiesUnderHandler(t *testing.T) {
	kill := map[sqldialect.Dialect]string{
		sqldialect.Postgres: "SELECT pg_terminate_backend(pg_backend_pid())",
		sqldialect.MySQL:    "KILL CONNECTION_ID()",
	}
	forEach(t, func(t *testing.T, b backend) {
		q, ok := kill[b.d]
		if !ok {
			return // SQLite has no server connection to kill; TestCrash kills the process
		}
		e := setup(t, b)
		ctx := context.Background()
		applied, err := e.in.Process(ctx, "evt-1", func(ctx context.Context, tx *sql.Tx) error {
			if err := e.credit(1, 50)(ctx, tx); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, q) // the server drops us mid-transaction
			return err
		})
		if err == nil || applied {
			t.Fatalf("killed connection: applied=%v err=%v, want an error", applied, err)
		}
		e.redeliverAfterFailure(ctx, "the connection died", "evt-1")
	})
}

func TestFingerprintMismatch(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
		m := inbox.Message{Key: "evt-1", Fingerprint: []byte("sha256:aaaa")}
		if ok, err := e.in.ProcessMessage(ctx, m, e.credit(1, 50)); !ok || err != nil {
			t.Fatalf("first: %v %v", ok, err)
		}
		if ok, err := e.in.ProcessMessage(ctx, m, e.credit(1, 50)); ok || err != nil {
			t.Fatalf("same fingerprint: applied=%v err=%v, want a plain duplicate", ok, err)
		}
		other := inbox.Message{Key: "evt-1", Fingerprint: []byte("sha256:bbbb")}
		ok, err := e.in.ProcessMessage(ctx, other, e.credit(1, 999))
		if ok || !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("other fingerprint: applied=%v err=%v, want ErrFingerprintMismatch", ok, err)
		}
		e.wantBalance(1, 50)
	})
}

func TestConsumersScopeKeys(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		other, err := inbox.New(e.db, b.d, "audit-consumer")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, in := range []*inbox.Inbox{e.in, other} {
			if ok, err := in.Process(ctx, "evt-1", e.credit(1, 50)); !ok || err != nil {
				t.Fatalf("consumer %s: applied=%v err=%v, want applied", in.Consumer(), ok, err)
			}
		}
		if e.balance(1) != 100 {
			t.Fatalf("balance = %d, want 100 (one credit per consumer)", e.balance(1))
		}
	})
}

func TestBadInputWritesNothing(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		ran := false
		fn := func(ctx context.Context, tx *sql.Tx) error { ran = true; return nil }
		cases := []struct {
			name string
			key  string
			fn   inbox.Handler
			want error
		}{
			{"empty key", "", fn, idem.ErrInvalidKey},
			{"key over 255 bytes", strings.Repeat("k", 256), fn, idem.ErrInvalidKey},
			{"nil handler", "evt-1", nil, idem.ErrInvalidArgument},
		}
		for _, c := range cases {
			if _, err := e.in.Process(ctx, c.key, c.fn); !errors.Is(err, c.want) {
				t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			}
		}
		if _, err := e.in.ProcessMessage(ctx, inbox.Message{Key: "k", Fingerprint: make([]byte, 65)}, fn); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Errorf("65-byte fingerprint: err = %v", err)
		}
		// In a batch a bad message fails alone (TestBinaryKeys has the
		// mixed case); a batch of bad messages only does no I/O.
		res, err := e.in.ProcessBatch(ctx, []inbox.Message{{Key: "x", Fingerprint: make([]byte, 65)}, {Key: ""}}, func(context.Context, *sql.Tx, inbox.Message) error { ran = true; return nil })
		if err != nil || len(res) != 2 || !errors.Is(res[0].Err, idem.ErrInvalidArgument) || !errors.Is(res[1].Err, idem.ErrInvalidKey) || !strings.Contains(res[1].Err.Error(), "message 1") {
			t.Errorf("batch of bad messages: %+v, %v; want ErrInvalidArgument, then ErrInvalidKey naming message 1", res, err)
		}
		if ran || e.keys() != 0 {
			t.Fatalf("bad input ran the handler (%v) or wrote keys (%d)", ran, e.keys())
		}
		closed, _ := b.open(t)
		cin, err := inbox.New(closed, b.d, "c")
		if err != nil {
			t.Fatal(err)
		}
		closed.Close()
		if _, err := cin.Process(ctx, "evt-1", fn); err == nil || !strings.Contains(err.Error(), "closed") || ran {
			t.Errorf("closed DB: err = %v, ran = %v", err, ran)
		}
	})
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	cases := []struct {
		name string
		d    sqldialect.Dialect
		cons string
		opts []inbox.Option
		want error
	}{
		{"unknown dialect", 0, "c", nil, sqldialect.ErrUnknownDialect},
		{"empty consumer", sqldialect.SQLite, "", nil, idem.ErrInvalidOption},
		{"table not an identifier", sqldialect.SQLite, "c", []inbox.Option{inbox.WithTable("inbox; DROP TABLE x")}, idem.ErrInvalidOption},
		{"schema on sqlite", sqldialect.SQLite, "c", []inbox.Option{inbox.WithTable("s.t")}, idem.ErrInvalidOption},
		{"retention below horizon", sqldialect.SQLite, "c", []inbox.Option{inbox.WithRedeliveryHorizon(7 * 24 * time.Hour), inbox.WithRetention(24 * time.Hour)}, idem.ErrInvalidOption},
		{"negative retry", sqldialect.SQLite, "c", []inbox.Option{inbox.WithRetry(-1, time.Millisecond, time.Second)}, idem.ErrInvalidOption},
		{"nil option", sqldialect.SQLite, "c", []inbox.Option{nil}, idem.ErrInvalidOption},
	}
	for _, c := range cases {
		if _, err := inbox.New(db, c.d, c.cons, c.opts...); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := inbox.New(nil, sqldialect.SQLite, "c"); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := inbox.New(db, sqldialect.Postgres, "c", inbox.WithTable("app.inbox"), inbox.WithRetention(8*24*time.Hour), inbox.WithRedeliveryHorizon(7*24*time.Hour)); err != nil {
		t.Errorf("valid options rejected: %v", err)
	}
}

// retryableErr looks like a PostgreSQL serialization failure.
type retryableErr struct{}

func (retryableErr) Error() string    { return "could not serialize access" }
func (retryableErr) SQLState() string { return "40001" }

func TestSerializationFailureIsRetried(t *testing.T) {
	b := backends[2] // postgres: the error type above speaks its SQLSTATE
	e := setup(t, b, inbox.WithRetry(5, time.Millisecond, 5*time.Millisecond))
	ctx := context.Background()
	var calls int
	applied, err := e.in.Process(ctx, "evt-1", func(ctx context.Context, tx *sql.Tx) error {
		calls++
		if err := e.credit(1, 50)(ctx, tx); err != nil {
			return err
		}
		if calls < 3 {
			return retryableErr{}
		}
		return nil
	})
	if err != nil || !applied || calls != 3 || e.balance(1) != 50 {
		t.Fatalf("applied=%v err=%v calls=%d balance=%d; want applied after 3 calls, balance 50", applied, err, calls, e.balance(1))
	}
	// Retries are bounded.
	calls = 0
	_, err = e.in.Process(ctx, "evt-2", func(context.Context, *sql.Tx) error { calls++; return retryableErr{} })
	if err == nil || calls != 6 || e.keys() != 1 {
		t.Fatalf("always-failing handler: err=%v calls=%d keys=%d; want an error after 6 calls, 1 key", err, calls, e.keys())
	}
}

func TestDeadlockIsRetried(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		if b.d == sqldialect.SQLite {
			return // SQLite serialises writers: no deadlock to provoke
		}
		e := setup(t, b, inbox.WithRetry(10, time.Millisecond, 20*time.Millisecond))
		ctx := context.Background()
		if b.d == sqldialect.MySQL {
			if _, err := e.db.Exec("SET GLOBAL innodb_lock_wait_timeout = 5"); err != nil {
				t.Fatal(err)
			}
		}
		// Two handlers lock wallets 1 and 2 in opposite orders; both hold their
		// first lock before taking the second, so the database must break a
		// deadlock, and the loser's transaction is retried.
		var barrier sync.WaitGroup
		barrier.Add(2)
		var once [2]sync.Once
		run := func(i, first, second int) error {
			_, err := e.in.Process(ctx, fmt.Sprintf("evt-%d", i), func(ctx context.Context, tx *sql.Tx) error {
				if err := e.credit(first, 1)(ctx, tx); err != nil {
					return err
				}
				once[i].Do(func() { barrier.Done(); barrier.Wait() })
				return e.credit(second, 1)(ctx, tx)
			})
			return err
		}
		errs := make(chan error, 2)
		go func() { errs <- run(0, 1, 2) }()
		go func() { errs <- run(1, 2, 1) }()
		for i := 0; i < 2; i++ {
			if err := <-errs; err != nil {
				t.Fatalf("deadlocked delivery not retried to success: %v", err)
			}
		}
		if e.balance(1) != 2 || e.balance(2) != 2 || e.keys() != 2 {
			t.Fatalf("balances %d, %d, keys %d; want 2, 2, 2", e.balance(1), e.balance(2), e.keys())
		}
	})
}

// TestPoolOfOneConnection: SQLite is often opened with SetMaxOpenConns(1).
// The transaction then holds the pool's only connection, so the inbox must
// never wait for another one inside it (preparing a statement on the pool
// there deadlocked). Every API runs on a fresh Inbox with one connection.
func TestPoolOfOneConnection(t *testing.T) {
	db := testenv.SQLite(t)
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nop := func(context.Context, *sql.Tx) error { return nil }
	each := func(context.Context, *sql.Tx, inbox.Message) error { return nil }
	set := func(context.Context, *sql.Tx, []inbox.Message) error { return nil }
	for round := range 2 { // the second round runs on prepared statements
		in := inboxtest.Migrated(t, db, sqldialect.SQLite, fmt.Sprint("pool-of-one-", round))
		for i := range 2 {
			if _, err := in.Process(ctx, fmt.Sprint("k", i), nop); err != nil {
				t.Fatalf("round %d: Process: %v", round, err)
			}
			msgs := []inbox.Message{{Key: fmt.Sprint("a", i)}, {Key: fmt.Sprint("b", i), Fingerprint: []byte("f")}, {Key: "k0"}}
			if _, err := in.ProcessBatch(ctx, msgs, each); err != nil {
				t.Fatalf("round %d: ProcessBatch: %v", round, err)
			}
			msgs = []inbox.Message{{Key: fmt.Sprint("c", i)}, {Key: fmt.Sprint("d", i)}, {Key: "k0"}}
			if _, err := in.ProcessBatchSet(ctx, msgs, set, nil); err != nil {
				t.Fatalf("round %d: ProcessBatchSet: %v", round, err)
			}
		}
		if _, err := in.Sweep(ctx, time.Hour, 100); err != nil {
			t.Fatalf("round %d: Sweep: %v", round, err)
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// recorder is an [inbox.Hooks] that writes down every call.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) Processed(consumer string, applied bool, err error, _ time.Duration) {
	r.add("processed %s applied=%v failed=%v", consumer, applied, err != nil)
}
func (r *recorder) Retried(consumer string, attempt int, _ error) {
	r.add("retried %s attempt=%d", consumer, attempt)
}
func (r *recorder) Swept(consumer string, n int) { r.add("swept %s %d", consumer, n) }
func (r *recorder) Batch(consumer string, n int, _ time.Duration) {
	r.add("batch %s n=%d", consumer, n)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// TestHooks: WithHooks sees every decision, retry, batch and sweep of a
// real inbox, in order.
func TestHooks(t *testing.T) {
	rec := &recorder{}
	e := setup(t, backends[2], inbox.WithHooks(rec), inbox.WithRetry(5, time.Millisecond, 5*time.Millisecond)) // postgres: retryableErr speaks its SQLSTATE
	ctx := context.Background()
	calls := 0
	flaky := func(ctx context.Context, tx *sql.Tx) error {
		if calls++; calls < 3 {
			return retryableErr{}
		}
		return e.credit(1, 50)(ctx, tx)
	}
	each := func(ctx context.Context, tx *sql.Tx, _ inbox.Message) error { return e.credit(2, 1)(ctx, tx) }
	steps := []struct {
		name string
		run  func() error
		want []string
	}{
		{"applied after two retries", func() error { _, err := e.in.Process(ctx, "evt-1", flaky); return err },
			[]string{"retried wallet-consumer attempt=1", "retried wallet-consumer attempt=2", "processed wallet-consumer applied=true failed=false"}},
		{"duplicate", func() error { _, err := e.in.Process(ctx, "evt-1", flaky); return err },
			[]string{"processed wallet-consumer applied=false failed=false"}},
		{"handler error", func() error {
			_, err := e.in.Process(ctx, "evt-2", func(context.Context, *sql.Tx) error { return errors.New("boom") })
			if err == nil {
				return errors.New("no error")
			}
			return nil
		}, []string{"processed wallet-consumer applied=false failed=true"}},
		{"batch", func() error {
			_, err := e.in.ProcessBatch(ctx, []inbox.Message{{Key: "b-1"}, {Key: "b-2"}, {Key: "evt-1"}}, each)
			return err
		}, []string{"batch wallet-consumer n=3", "processed wallet-consumer applied=true failed=false", "processed wallet-consumer applied=true failed=false", "processed wallet-consumer applied=false failed=false"}},
		{"sweep", func() error { _, err := e.in.Sweep(ctx, time.Hour, 100); return err },
			[]string{"swept wallet-consumer 0"}},
	}
	for _, s := range steps {
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := rec.take(); fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("%s: hooks saw\n%q\nwant\n%q", s.name, got, s.want)
		}
	}
	if _, err := inbox.New(e.db, e.d, "c", inbox.WithHooks(nil)); err == nil {
		t.Error("WithHooks(nil) accepted")
	}
}
