package sqldialect_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestDetectAndMismatch (issue 28): a dialect that does not match the
// database made Migrate fail with the server's raw syntax error. Detect
// names the server, and Mismatch turns the failure into an error naming the
// dialect to pass.
func TestDetectAndMismatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		d, bad  sqldialect.Dialect
		open    func(t testing.TB) *sql.DB
		product string
	}{
		{"sqlite", sqldialect.SQLite, sqldialect.Postgres, testenv.SQLite, "SQLite"},
		{"postgres", sqldialect.Postgres, sqldialect.SQLite, testenv.Postgres, "PostgreSQL"},
		{"mysql", sqldialect.MySQL, sqldialect.Postgres, testenv.MySQL, "MySQL or MariaDB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := c.open(t)
			ctx := context.Background()
			got, err := sqldialect.Detect(ctx, db)
			if err != nil || got != c.d {
				t.Fatalf("Detect = %v, %v; want %v", got, err, c.d)
			}
			cause := errors.New("syntax error at end of input")
			if err := c.d.Mismatch(ctx, db, "the inbox", cause); err != nil {
				t.Errorf("Mismatch with the right dialect = %v; want nil", err)
			}
			err = c.bad.Mismatch(ctx, db, "the inbox", cause)
			want := "the database is " + c.product + " but the inbox was built with sqldialect." + map[sqldialect.Dialect]string{sqldialect.Postgres: "Postgres", sqldialect.SQLite: "SQLite"}[c.bad] + ": pass sqldialect."
			var me *sqldialect.MismatchError
			if !errors.Is(err, sqldialect.ErrWrongDialect) || !errors.Is(err, cause) || !errors.As(err, &me) || me.Database != c.d || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Mismatch = %v; want a MismatchError starting %q and wrapping the cause", err, want)
			}
			// A cancelled context never probes, so it never hides the cause.
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := c.bad.Mismatch(cctx, db, "the inbox", cause); err != nil {
				t.Errorf("Mismatch with a cancelled context = %v; want nil", err)
			}
		})
	}
}
