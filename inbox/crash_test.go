package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// The crash tests run a delivery in a child process (this test binary,
// re-executed) that dies with os.Exit at a chosen step, as a consumer killed
// by the OOM killer would; the parent then redelivers and checks that the
// effect is applied exactly once.
const crashEnv = "IDEM_INBOX_CRASH_AT"

const (
	crashInHandler   = "in-handler"   // effect written, transaction open
	crashAfterCommit = "after-commit" // committed, not acknowledged
	crashNever       = "never"
)

func crashChild() {
	at := os.Getenv(crashEnv)
	d, err := sqldialect.Parse(os.Getenv("IDEM_INBOX_CRASH_DIALECT"))
	if err != nil {
		panic(err)
	}
	db, err := sql.Open(os.Getenv("IDEM_INBOX_CRASH_DRIVER"), os.Getenv("IDEM_INBOX_CRASH_DSN"))
	if err != nil {
		panic(err)
	}
	in, err := inbox.New(db, d, "wallet-consumer")
	if err != nil {
		panic(err)
	}
	effect := func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE wallet SET balance = balance + 50 WHERE id = 1"); err != nil {
			return err
		}
		if at == crashInHandler {
			os.Exit(3)
		}
		return nil
	}
	if os.Getenv("IDEM_INBOX_CRASH_API") == "set" {
		_, err = in.ProcessBatchSet(context.Background(), []inbox.Message{{Key: "evt-1"}},
			func(ctx context.Context, tx *sql.Tx, _ []inbox.Message) error { return effect(ctx, tx) }, nil)
	} else {
		_, err = in.Process(context.Background(), "evt-1", effect)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if at == crashAfterCommit {
		os.Exit(3)
	}
	os.Exit(0)
}

func TestCrash(t *testing.T) {
	drivers := map[sqldialect.Dialect]string{sqldialect.SQLite: "sqlite", sqldialect.Postgres: "pgx", sqldialect.MySQL: "mysql"}
	forEach(t, func(t *testing.T, b backend) {
		for _, api := range []string{"process", "set"} {
			for _, at := range []string{crashInHandler, crashAfterCommit, crashNever} {
				t.Run(api+"/"+at, func(t *testing.T) {
					var dsn string
					switch b.d {
					case sqldialect.SQLite:
						dsn = sqldialect.SQLiteDSN(t.TempDir() + "/crash.db")
					default:
						db, _ := b.open(t)
						dsn = dsnOf(t, b, db)
					}
					db, err := sql.Open(drivers[b.d], dsn)
					if err != nil {
						t.Fatal(err)
					}
					defer db.Close()
					in, _ := inbox.New(db, b.d, "wallet-consumer", b.opts...)
					e := &env{t: t, d: b.d, db: db, in: in, bucketed: b.opts == nil}
					if err := in.Migrate(context.Background()); err != nil {
						t.Fatal(err)
					}
					if _, err := db.Exec("CREATE TABLE wallet (id INT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
						t.Fatal(err)
					}
					if _, err := db.Exec("INSERT INTO wallet (id, balance) VALUES (1, 0)"); err != nil {
						t.Fatal(err)
					}

					cmd := exec.Command(os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), crashEnv+"="+at, "IDEM_INBOX_CRASH_DIALECT="+b.d.String(),
						"IDEM_INBOX_CRASH_DRIVER="+drivers[b.d], "IDEM_INBOX_CRASH_DSN="+dsn, "IDEM_INBOX_CRASH_API="+api)
					out, err := cmd.CombinedOutput()
					wantCode := 3
					if at == crashNever {
						wantCode = 0
					}
					if code := cmd.ProcessState.ExitCode(); code != wantCode {
						t.Fatalf("child exited %d (%v), want %d: %s", code, err, wantCode, out)
					}
					wantBefore := int64(50)
					if at == crashInHandler {
						wantBefore = 0
					}
					if got := e.balance(1); got != wantBefore {
						t.Fatalf("after the crash %s: balance %d, want %d", at, got, wantBefore)
					}
					// The broker redelivers (twice, for good measure).
					for i := 0; i < 2; i++ {
						applied, err := in.Process(context.Background(), "evt-1", e.credit(1, 50))
						if err != nil {
							t.Fatal(err)
						}
						if wantApplied := at == crashInHandler && i == 0; applied != wantApplied {
							t.Fatalf("redelivery %d after %s: applied=%v, want %v", i, at, applied, wantApplied)
						}
					}
					if got := e.balance(1); got != 50 || e.keys() != 1 {
						t.Fatalf("after crash %s and redelivery: balance %d keys %d, want 50 and 1", at, got, e.keys())
					}
				})
			}
		}
	})
}

// dsnOf recovers the DSN of a backend's fresh database for the child.
func dsnOf(t *testing.T, b backend, db *sql.DB) string {
	t.Helper()
	switch b.d {
	case sqldialect.Postgres:
		var schema string
		if err := db.QueryRow("SELECT current_schema()").Scan(&schema); err != nil {
			t.Fatal(err)
		}
		var port int
		if err := db.QueryRow("SELECT current_setting('port')::int").Scan(&port); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&search_path=%s", port, schema)
	case sqldialect.MySQL:
		var name string
		var port int
		if err := db.QueryRow("SELECT DATABASE(), @@port").Scan(&name, &port); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", port, name)
	}
	t.Fatal("no DSN for", b.name)
	return ""
}
