// Package inboxtest gives tests of the inbox and of what is built on it a
// migrated inbox in one call.
package inboxtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// Migrated returns an inbox of db for consumer, with its tables migrated;
// an error from inbox.New or Migrate fails the test.
func Migrated(tb testing.TB, db *sql.DB, d sqldialect.Dialect, consumer string, opts ...inbox.Option) *inbox.Inbox {
	tb.Helper()
	in, err := inbox.New(db, d, consumer, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return in
}
