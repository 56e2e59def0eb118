package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// TestNotMigratedSaysSo (issue 28): an Inbox on a database where Migrate
// never ran failed with "…: inbox: key table cannot dedupe", which reads
// like a bad schema. A missing table is ErrNotMigrated, not ErrUnsafeTable,
// and the error says what to do, in every engine and layout.
func TestNotMigratedSaysSo(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := b.open(t)
		ctx := context.Background()
		in, err := inbox.New(db, b.d, "wallet-consumer", b.opts...)
		if err != nil {
			t.Fatal(err)
		}
		const want = "inbox: table idem_inbox does not exist: call Migrate or apply SchemaSQL()"
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, inbox.ErrNotMigrated) || errors.Is(err, inbox.ErrUnsafeTable) || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "cannot dedupe") {
				t.Errorf("%s on a database never migrated: %v; want ErrNotMigrated (not ErrUnsafeTable) starting %q", what, err, want)
			}
		}
		applied, err := in.Process(ctx, "evt-1", func(context.Context, *sql.Tx) error {
			t.Error("handler ran on a database never migrated")
			return nil
		})
		if applied {
			t.Error("applied on a database never migrated")
		}
		check("Process", err)
		check("Verify", in.Verify(ctx))
		_, err = in.Sweep(ctx, time.Hour, 100)
		check("Sweep", err)
		// Migrate cures it.
		if err := in.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := in.Verify(ctx); err != nil {
			t.Fatalf("Verify after Migrate: %v", err)
		}
	})
}

// TestWrongDialectNamesTheOneToPass (issue 28): sqldialect.SQLite given a
// PostgreSQL pool made Migrate fail with the server's "syntax error at end
// of input (SQLSTATE 42601)" or "relation sqlite_master does not exist".
// Migrate, and Process on an Inbox that never migrates, now name the
// database and the dialect to pass.
func TestWrongDialectNamesTheOneToPass(t *testing.T) {
	wrong := map[sqldialect.Dialect]sqldialect.Dialect{sqldialect.Postgres: sqldialect.SQLite, sqldialect.SQLite: sqldialect.Postgres, sqldialect.MySQL: sqldialect.Postgres}
	product := map[sqldialect.Dialect]string{sqldialect.Postgres: "PostgreSQL", sqldialect.SQLite: "SQLite", sqldialect.MySQL: "MySQL or MariaDB"}
	name := map[sqldialect.Dialect]string{sqldialect.Postgres: "Postgres", sqldialect.SQLite: "SQLite", sqldialect.MySQL: "MySQL"}
	forEach(t, func(t *testing.T, b backend) {
		db, _ := b.open(t)
		ctx := context.Background()
		bad := wrong[b.d]
		want := "inbox: the database is " + product[b.d] + " but the inbox was built with sqldialect." + name[bad] + ": pass sqldialect." + name[b.d]
		in, err := inbox.New(db, bad, "wallet-consumer", b.opts...)
		if err != nil {
			t.Fatal(err)
		}
		err = in.Migrate(ctx)
		if !errors.Is(err, sqldialect.ErrWrongDialect) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Migrate with sqldialect.%s: %v; want ErrWrongDialect starting %q", name[bad], err, want)
		}
		lazy, _ := inbox.New(db, bad, "wallet-consumer", b.opts...)
		_, err = lazy.Process(ctx, "evt-1", func(context.Context, *sql.Tx) error { return nil })
		if !errors.Is(err, sqldialect.ErrWrongDialect) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Process with sqldialect.%s: %v; want ErrWrongDialect starting %q", name[bad], err, want)
		}
	})
}
