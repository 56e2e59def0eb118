package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/keystore/sqlstore/pglisten"
	"github.com/idem-go/idem/keystore/storetest"
	"github.com/idem-go/idem/sqldialect"
)

// listening returns a migrated PostgreSQL store with a pglisten listener.
func listening(t *testing.T) *sqlstore.Store {
	s, _ := listeningDB(t)
	return s
}

// listeningDB is listening, with its database.
func listeningDB(t *testing.T) (*sqlstore.Store, *sql.DB) {
	t.Helper()
	db := testenv.Postgres(t)
	l, err := pglisten.New(db)
	if err != nil {
		t.Fatal(err)
	}
	return newStore(t, db, sqldialect.Postgres, sqlstore.WithListener(l)), db
}

// On PostgreSQL with a listener, the suite's Notify checks run: waiters
// are woken by the NOTIFY of Complete and Release.
func TestConformanceListener(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store { return listening(t) })
}

// A listener on SQLite is refused; a store without one cannot notify.
func TestListenerOptions(t *testing.T) {
	if _, err := sqlstore.New(testenv.SQLite(t), sqldialect.SQLite, sqlstore.WithListener(&pglisten.Listener{})); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("WithListener on SQLite: %v", err)
	}
	if _, err := sqlstore.New(testenv.SQLite(t), sqldialect.SQLite, sqlstore.WithListener(nil)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("WithListener(nil): %v", err)
	}
	if _, err := pglisten.New(testenv.SQLite(t)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("pglisten on SQLite: %v", err)
	}
	s := newStore(t, testenv.SQLite(t), sqldialect.SQLite)
	if _, _, err := s.Notify(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Notify without a listener: %v, want errors.ErrUnsupported", err)
	}
}

// TestListenerReconnects: a waiter whose listening connection is
// terminated is woken by the reconnection, listens again, and is woken by
// the Complete that follows, long before its poll.
func TestListenerReconnects(t *testing.T) {
	st, db := listeningDB(t)
	s := &storetest.Counted{Store: st}
	ctx := context.Background()
	holder, err := st.Reserve(ctx, "k", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	done := storetest.AwaitResult(ctx, s, "k", "r")
	listeners := func() int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.WaitFor(t, time.Minute, "the waiter asleep", func() bool { return s.Reserves() >= 2 && listeners() == 1 })
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the waiter asleep again", func() bool { return s.Reserves() >= 3 && listeners() == 1 })
	start := time.Now()
	if err := st.Complete(ctx, holder, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Await: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("answered %v after Complete: not woken by the notification", took)
	}
	testenv.WaitFor(t, time.Minute, "the listener gone", func() bool { return listeners() == 0 })
}
