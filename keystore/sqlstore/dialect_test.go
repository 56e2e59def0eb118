package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// TestWrongDialectNamesTheOneToPass (issue 28): sqldialect.SQLite given a
// PostgreSQL pool made Migrate fail with the server's raw error ("relation
// sqlite_master does not exist"), and sqldialect.Postgres given a SQLite
// one with "unrecognized token". Migrate now names the database and the
// dialect to pass.
func TestWrongDialectNamesTheOneToPass(t *testing.T) {
	for _, c := range []struct {
		d, bad        sqldialect.Dialect
		open          func(testing.TB) *sql.DB
		product, want string
	}{
		{sqldialect.Postgres, sqldialect.SQLite, testenv.Postgres, "PostgreSQL", "sqldialect.SQLite: pass sqldialect.Postgres"},
		{sqldialect.SQLite, sqldialect.Postgres, testenv.SQLite, "SQLite", "sqldialect.Postgres: pass sqldialect.SQLite"},
	} {
		t.Run(c.d.String(), func(t *testing.T) {
			s, err := sqlstore.New(c.open(t), c.bad)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Migrate(context.Background())
			want := "sqlstore: migrate: the database is " + c.product + " but the key store was built with " + c.want
			if !errors.Is(err, sqldialect.ErrWrongDialect) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Migrate = %v; want ErrWrongDialect starting %q", err, want)
			}
		})
	}
}
