package inbox_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// Migrate hands the replication check's findings to WithReplicationCheck's
// function, once; SQLite has no standby, so no hazard. (The PostgreSQL
// cases, an asynchronous standby reported and a synchronous one not, run
// in internal/testsupport/failoverprobe on a real primary and standby.)
func TestMigrateReplicationCheck(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	var calls int
	var got sqldialect.Replication
	inboxtest.Migrated(t, db, sqldialect.SQLite, "c", inbox.WithReplicationCheck(func(r sqldialect.Replication) { calls++; got = r }))
	if calls != 1 || len(got.Hazards) != 0 {
		t.Fatalf("check called %d times with %+v, want once without hazards", calls, got)
	}
	if _, err := inbox.New(db, sqldialect.SQLite, "c", inbox.WithReplicationCheck(nil)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("nil check: %v, want ErrInvalidOption", err)
	}
}

// Without the option, a logger enabled at Warn gets one line per hazard;
// SQLite has none, so nothing is logged at Warn.
func TestMigrateReplicationLogged(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inboxtest.Migrated(t, db, sqldialect.SQLite, "c", inbox.WithLogger(log))
	if strings.Contains(buf.String(), "replication") {
		t.Fatalf("logged %q on SQLite", buf.String())
	}
}
