package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// handMade is a key table created by hand, as a migration tool would.
type handMade struct {
	name string
	ddl  []string // "{T}" stands for the table's name
	ok   bool     // the inbox may use it
	why  string   // a word the refusal must contain
}

const (
	pgCols     = "consumer text NOT NULL, idem_key text NOT NULL, fingerprint bytea, processed_at timestamptz NOT NULL DEFAULT now()"
	sqliteCols = "consumer TEXT NOT NULL, idem_key TEXT NOT NULL, fingerprint BLOB, processed_at INTEGER NOT NULL"
	mysqlCols  = "consumer VARBINARY(255) NOT NULL, idem_key VARBINARY(255) NOT NULL, fingerprint VARBINARY(64) NULL, processed_at DATETIME(6) NOT NULL"
)

var handMadeTables = map[sqldialect.Dialect][]handMade{
	sqldialect.Postgres: {
		{"partitioned, processed_at in the key", []string{"CREATE TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key, processed_at)) PARTITION BY RANGE (processed_at)", "CREATE TABLE {T}_all PARTITION OF {T} DEFAULT"}, false, "exactly (consumer, idem_key)"},
		{"no unique constraint", []string{"CREATE TABLE {T} (" + pgCols + ")"}, false, "found: none"},
		{"unique on idem_key only", []string{"CREATE TABLE {T} (" + pgCols + ", UNIQUE (idem_key))"}, false, "does not contain both"},
		{"unique on idem_key besides the key", []string{"CREATE TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key), UNIQUE (idem_key))"}, false, "does not contain both"},
		{"superset", []string{"CREATE TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key, processed_at))"}, false, "exactly (consumer, idem_key)"},
		{"partial", []string{"CREATE TABLE {T} (" + pgCols + ")", "CREATE UNIQUE INDEX {T}_u ON {T} (consumer, idem_key) WHERE processed_at > '2020-01-01'"}, false, "partial"},
		{"deferrable", []string{"CREATE TABLE {T} (" + pgCols + ", UNIQUE (consumer, idem_key) DEFERRABLE INITIALLY DEFERRED)"}, false, "deferrable"},
		{"unique on lower(idem_key)", []string{"CREATE TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key))", "CREATE UNIQUE INDEX {T}_l ON {T} (consumer, lower(idem_key))"}, false, "does not contain both"},
		{"char(255) ignores trailing spaces", []string{"CREATE TABLE {T} (consumer text NOT NULL, idem_key char(255) NOT NULL, fingerprint bytea, processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, idem_key))"}, false, "bpchar"},
		{"varchar(64)", []string{"CREATE TABLE {T} (consumer text NOT NULL, idem_key varchar(64) NOT NULL, fingerprint bytea, processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, idem_key))"}, false, "varchar(64)"},
		{"text fingerprint", []string{"CREATE TABLE {T} (consumer text NOT NULL, idem_key text NOT NULL, fingerprint text, processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, idem_key))"}, false, "fingerprint"},
		{"unlogged", []string{"CREATE UNLOGGED TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key))"}, false, "UNLOGGED"},
		{"BEFORE INSERT trigger", []string{"CREATE TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key))",
			"CREATE FUNCTION {T}_f() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$",
			"CREATE TRIGGER {T}_t BEFORE INSERT ON {T} FOR EACH ROW EXECUTE FUNCTION {T}_f()"}, false, "trigger"},
		{"DO INSTEAD NOTHING rule", []string{"CREATE TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key))", "CREATE RULE {T}_r AS ON INSERT TO {T} DO INSTEAD NOTHING"}, false, "rule"},
		{"hash-partitioned by consumer, exact key", []string{"CREATE TABLE {T} (" + pgCols + ", PRIMARY KEY (consumer, idem_key)) PARTITION BY HASH (consumer)",
			"CREATE TABLE {T}_0 PARTITION OF {T} FOR VALUES WITH (MODULUS 2, REMAINDER 0)", "CREATE TABLE {T}_1 PARTITION OF {T} FOR VALUES WITH (MODULUS 2, REMAINDER 1)"}, true, ""},
		{"exact key in the other order, plus a superset", []string{"CREATE TABLE {T} (" + pgCols + ", UNIQUE (idem_key, consumer), UNIQUE (consumer, idem_key, processed_at))"}, true, ""},
	},
	sqldialect.SQLite: {
		{"no unique constraint", []string{"CREATE TABLE {T} (" + sqliteCols + ")"}, false, "found: none"},
		{"unique on idem_key only", []string{"CREATE TABLE {T} (" + sqliteCols + ", UNIQUE (idem_key))"}, false, "does not contain both"},
		{"superset", []string{"CREATE TABLE {T} (" + sqliteCols + ", PRIMARY KEY (consumer, idem_key, processed_at)) WITHOUT ROWID"}, false, "exactly (consumer, idem_key)"},
		{"partial", []string{"CREATE TABLE {T} (" + sqliteCols + ")", "CREATE UNIQUE INDEX {T}_u ON {T} (consumer, idem_key) WHERE processed_at > 0"}, false, "partial"},
		{"NOCASE", []string{"CREATE TABLE {T} (consumer TEXT NOT NULL, idem_key TEXT NOT NULL COLLATE NOCASE, fingerprint BLOB, processed_at INTEGER NOT NULL, PRIMARY KEY (consumer, idem_key))"}, false, "NOCASE"},
		{"INTEGER affinity", []string{"CREATE TABLE {T} (consumer TEXT NOT NULL, idem_key INTEGER NOT NULL, fingerprint BLOB, processed_at INTEGER NOT NULL, PRIMARY KEY (consumer, idem_key))"}, false, "affinity"},
		{"BEFORE INSERT trigger", []string{"CREATE TABLE {T} (" + sqliteCols + ", PRIMARY KEY (consumer, idem_key))",
			"CREATE TRIGGER {T}_t BEFORE INSERT ON {T} BEGIN SELECT RAISE(IGNORE); END"}, false, "trigger"},
		{"rowid table, exact key", []string{"CREATE TABLE {T} (" + sqliteCols + ", PRIMARY KEY (consumer, idem_key))"}, true, ""},
		{"unique index in the other order", []string{"CREATE TABLE {T} (" + sqliteCols + ")", "CREATE UNIQUE INDEX {T}_u ON {T} (idem_key, consumer)"}, true, ""},
	},
	sqldialect.MySQL: {
		{"partitioned, processed_at in the key", []string{"CREATE TABLE {T} (" + mysqlCols + ", PRIMARY KEY (consumer, idem_key, processed_at)) ENGINE=InnoDB PARTITION BY KEY (processed_at) PARTITIONS 2"}, false, "exactly (consumer, idem_key)"},
		{"no unique constraint", []string{"CREATE TABLE {T} (" + mysqlCols + ") ENGINE=InnoDB"}, false, "found: none"},
		{"unique on idem_key only", []string{"CREATE TABLE {T} (" + mysqlCols + ", UNIQUE KEY (idem_key)) ENGINE=InnoDB"}, false, "does not contain both"},
		{"superset", []string{"CREATE TABLE {T} (" + mysqlCols + ", PRIMARY KEY (consumer, idem_key, processed_at)) ENGINE=InnoDB"}, false, "exactly (consumer, idem_key)"},
		{"case-insensitive VARCHAR", []string{"CREATE TABLE {T} (consumer VARCHAR(255) NOT NULL, idem_key VARCHAR(255) NOT NULL, fingerprint VARBINARY(64) NULL, processed_at DATETIME(6) NOT NULL, PRIMARY KEY (consumer, idem_key)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"}, false, "VARBINARY"},
		{"prefix index", []string{"CREATE TABLE {T} (" + mysqlCols + ", PRIMARY KEY (consumer, idem_key(16))) ENGINE=InnoDB"}, false, "prefix"},
		{"VARBINARY(64)", []string{"CREATE TABLE {T} (consumer VARBINARY(255) NOT NULL, idem_key VARBINARY(64) NOT NULL, fingerprint VARBINARY(64) NULL, processed_at DATETIME(6) NOT NULL, PRIMARY KEY (consumer, idem_key)) ENGINE=InnoDB"}, false, "64 bytes"},
		{"VARBINARY(16) fingerprint", []string{"CREATE TABLE {T} (consumer VARBINARY(255) NOT NULL, idem_key VARBINARY(255) NOT NULL, fingerprint VARBINARY(16) NULL, processed_at DATETIME(6) NOT NULL, PRIMARY KEY (consumer, idem_key)) ENGINE=InnoDB"}, false, "fingerprint"},
		{"MyISAM", []string{"CREATE TABLE {T} (" + mysqlCols + ", PRIMARY KEY (consumer, idem_key)) ENGINE=MyISAM"}, false, "InnoDB"},
		{"exact unique key besides a superset primary key", []string{"CREATE TABLE {T} (" + mysqlCols + ", PRIMARY KEY (consumer, idem_key, processed_at), UNIQUE KEY (idem_key, consumer)) ENGINE=InnoDB"}, true, ""},
	},
}

// TestVerifyRefusesHandMadeTables (issue 13 case 13): Migrate used to
// accept any existing table, and with a wider or missing unique constraint
// every redelivery applied again (3 of 3). Migrate, and the first Process of
// an Inbox that never migrates, must refuse a table that does not enforce
// byte-exact uniqueness of exactly (consumer, idem_key), naming the table
// and the problem; a table that does enforce it is accepted, whatever its
// other indexes or partitioning.
func TestVerifyRefusesHandMadeTables(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		for i, h := range handMadeTables[b.d] {
			table := "hand_" + string(rune('a'+i))
			for _, s := range h.ddl {
				if _, err := e.db.ExecContext(ctx, strings.ReplaceAll(s, "{T}", table)); err != nil {
					t.Fatalf("%s: %s: %v", h.name, s, err)
				}
			}
			in, err := inbox.New(e.db, b.d, "wallet-consumer", inbox.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			merr := in.Migrate(ctx)
			// A second Inbox that never calls Migrate (the table came from a
			// migration tool): three deliveries of one key.
			lazy, _ := inbox.New(e.db2, b.d, "wallet-consumer", inbox.WithTable(table))
			before := e.balance(1)
			applied := 0
			var perr error
			for range 3 {
				ok, err := lazy.Process(ctx, "evt-"+table, e.credit(1, 1))
				if err != nil {
					perr = err
				}
				if ok {
					applied++
				}
			}
			effects := e.balance(1) - before
			if h.ok {
				if merr != nil || perr != nil || applied != 1 || effects != 1 {
					t.Errorf("%s: Migrate: %v, Process: %v, applied %d, effects %d; want the table accepted and 1 effect", h.name, merr, perr, applied, effects)
				}
				continue
			}
			t.Logf("%s: %v", h.name, merr)
			for what, err := range map[string]error{"Migrate": merr, "Process": perr} {
				if !errors.Is(err, inbox.ErrUnsafeTable) || !strings.Contains(err.Error(), table) || !strings.Contains(err.Error(), h.why) {
					t.Errorf("%s: %s err = %v; want ErrUnsafeTable naming %s and %q", h.name, what, err, table, h.why)
				}
			}
			if applied != 0 || effects != 0 {
				t.Errorf("%s: %d of 3 deliveries applied (%d effects); want none on a table that cannot dedupe", h.name, applied, effects)
			}
		}
		// The table Migrate creates passes; Verify can be called directly.
		if err := e.in.Verify(ctx); err != nil {
			t.Fatalf("Verify on the table Migrate made: %v", err)
		}
		missing, _ := inbox.New(e.db, b.d, "wallet-consumer", inbox.WithTable("no_such_table"))
		if err := missing.Verify(ctx); !errors.Is(err, inbox.ErrNotMigrated) || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("Verify of a missing table: %v", err)
		}
	})
}

// Verify only reads the catalog: on SQLite it takes no write lock, so a
// writer holding the database (another process's long transaction)
// neither delays nor fails it. It used to begin IMMEDIATE like the
// inbox's other transactions and fail with SQLITE_BUSY after the busy
// timeout; a flake run at load 5 hit that on a delivery's verify.
func TestVerifyWhileAWriterHoldsSQLite(t *testing.T) {
	t.Parallel()
	forEachSQLite(t, func(t *testing.T, b backend, e *env) {
		ctx := context.Background()
		conn, err := e.db2.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		defer conn.ExecContext(ctx, "ROLLBACK")
		in, err := inbox.New(e.db, b.d, "wallet-consumer", b.opts...)
		if err != nil {
			t.Fatal(err)
		}
		vctx, cancel := context.WithTimeout(ctx, time.Minute) // a hang guard
		defer cancel()
		if err := in.Verify(vctx); err != nil {
			t.Fatalf("Verify while a writer holds the database: %v", err)
		}
	})
}

// forEachSQLite runs f on a fresh env of each SQLite layout.
func forEachSQLite(t *testing.T, f func(t *testing.T, b backend, e *env)) {
	for _, b := range backends {
		if b.d == sqldialect.SQLite {
			t.Run(b.name, func(t *testing.T) { f(t, b, setup(t, b)) })
		}
	}
}

// An Inbox's first use (Verify, the clock) that meets a busy database is
// retried as a transaction is, instead of failing the delivery.
func TestFirstUseRetriesBusy(t *testing.T) {
	t.Parallel()
	forEachSQLite(t, func(t *testing.T, b backend, e *env) {
		db := &busyBegins{Beginner: e.db, err: sqliteBusy(t, e.db2), n: 2}
		in, err := inbox.New(db, b.d, "wallet-consumer", b.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := in.Process(context.Background(), "k1", e.credit(1, 1)); err != nil || !ok {
			t.Fatalf("Process = %v, %v; want applied after the busy database's retries", ok, err)
		}
		if db.n != 0 {
			t.Fatalf("%d busy begins left: the first use did not meet them", db.n)
		}
		e.wantBalance(1, 1)
	})
}

// busyBegins fails its first n BeginTx calls with err.
type busyBegins struct {
	inbox.Beginner
	mu  sync.Mutex
	err error
	n   int
}

func (b *busyBegins) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	b.mu.Lock()
	fail := b.n > 0
	if fail {
		b.n--
	}
	b.mu.Unlock()
	if fail {
		return nil, b.err
	}
	return b.Beginner.BeginTx(ctx, opts)
}

// sqliteBusy returns the driver's own SQLITE_BUSY error: a BEGIN IMMEDIATE
// without a busy timeout while another connection holds the write lock.
func sqliteBusy(t *testing.T, db *sql.DB) error {
	t.Helper()
	ctx := context.Background()
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer holder.ExecContext(ctx, "ROLLBACK")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	defer c.ExecContext(ctx, "PRAGMA busy_timeout = 5000")
	_, busy := c.ExecContext(ctx, "BEGIN IMMEDIATE")
	if busy == nil {
		c.ExecContext(ctx, "ROLLBACK")
		t.Fatal("BEGIN IMMEDIATE beside a writer succeeded")
	}
	if !sqldialect.SQLite.Retryable(busy) {
		t.Fatalf("%v is not a retryable error", busy)
	}
	return busy
}
