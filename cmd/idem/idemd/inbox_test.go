package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// inboxDB is a database idem inbox is tested on: the --db value, and the
// same database opened by the test (the consumer's process).
type inboxDB struct {
	name string
	d    sqldialect.Dialect
	open func(t *testing.T) (flag string, db *sql.DB)
}

var inboxDBs = []inboxDB{
	{"sqlite", sqldialect.SQLite, func(t *testing.T) (string, *sql.DB) {
		p := filepath.Join(t.TempDir(), "inbox.db")
		return "sqlite:" + p, testenv.Open(t, "sqlite", sqldialect.SQLiteDSN(p))
	}},
	{"postgres", sqldialect.Postgres, func(t *testing.T) (string, *sql.DB) {
		u := testenv.PostgresURL(t)
		return u, testenv.Open(t, "pgx", u)
	}},
	{"mariadb", sqldialect.MySQL, func(t *testing.T) (string, *sql.DB) {
		dsn := testenv.MySQLDSN(t)
		return "mysql://" + dsn, testenv.Open(t, "mysql", dsn)
	}},
}

// TestInboxCommand runs idem inbox as a process on each engine and layout:
// a key recorded by inbox.Process is shown, forgotten, then applied once
// more by its redelivery; a missing key fails show and forget.
func TestInboxCommand(t *testing.T) {
	t.Parallel()
	for _, db := range inboxDBs {
		for _, layout := range []inbox.Layout{inbox.LayoutBuckets, inbox.LayoutRows} {
			t.Run(db.name+"-"+layout.String(), func(t *testing.T) {
				t.Parallel()
				testInboxCommand(t, db, layout)
			})
		}
	}
}

func testInboxCommand(t *testing.T, idb inboxDB, layout inbox.Layout) {
	ctx := context.Background()
	flag, db := idb.open(t)
	in, err := inbox.New(db, idb.d, "billing", inbox.WithTable("orders_inbox"), inbox.WithLayout(layout))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (n INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	effect := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (n) VALUES (1)`)
		return err
	}
	deliver := func(want bool) {
		t.Helper()
		applied, err := in.ProcessMessage(ctx, inbox.Message{Key: "order-1", Fingerprint: []byte{0xca, 0xfe}}, effect)
		if err != nil || applied != want {
			t.Fatalf("delivery: applied=%v err=%v, want applied=%v", applied, err, want)
		}
	}
	effects := func() int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM effects`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	idem := func(args ...string) (string, string, bool) {
		return runIdem(t, append([]string{"inbox", "--db", flag, "--table", "orders_inbox"}, args...)...)
	}
	deliver(true)
	deliver(false)

	out, errOut, ok := idem("show", "order-1", "--consumer", "billing")
	if !ok {
		t.Fatalf("show: %s", errOut)
	}
	for _, want := range []string{"key:          order-1", "consumer:     billing", "layout:       " + layout.String(), "fingerprint:  cafe", "table:        orders_inbox"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show printed\n%s\nwithout %q", out, want)
		}
	}
	out, errOut, ok = idem("show", "order-1", "--consumer", "billing", "-o", "json")
	if !ok {
		t.Fatalf("show -o json: %s", errOut)
	}
	var v recordView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("show -o json printed %q: %v", out, err)
	}
	if v.Key != "order-1" || v.Consumer != "billing" || v.Layout != layout.String() || v.Fingerprint != hex.EncodeToString([]byte{0xca, 0xfe}) ||
		(layout == inbox.LayoutRows) != !v.RecordedAt.IsZero() || (layout == inbox.LayoutBuckets) != !v.Bucket.IsZero() {
		t.Fatalf("show -o json: %+v", v)
	}

	// Another consumer's key, and a key never delivered: not recorded,
	// and forget changes nothing.
	for _, args := range [][]string{{"show", "order-1", "--consumer", "shipping"}, {"forget", "order-1", "--consumer", "shipping"}, {"show", "order-2", "--consumer", "billing"}, {"forget", "order-2", "--consumer", "billing"}} {
		out, errOut, ok := idem(args...)
		if ok || !strings.Contains(errOut, "not recorded") {
			t.Fatalf("idem inbox %v: ok=%v stdout=%q stderr=%q, want a not-recorded failure", args, ok, out, errOut)
		}
	}
	deliver(false)

	out, errOut, ok = idem("forget", "order-1", "--consumer", "billing")
	if !ok || !strings.Contains(out, "forgot order-1 of consumer billing") {
		t.Fatalf("forget: ok=%v stdout=%q stderr=%q", ok, out, errOut)
	}
	if _, errOut, ok := idem("show", "order-1", "--consumer", "billing"); ok || !strings.Contains(errOut, "not recorded") {
		t.Fatalf("show after forget: ok=%v %s", ok, errOut)
	}
	if _, errOut, ok := idem("forget", "order-1", "--consumer", "billing"); ok || !strings.Contains(errOut, "not recorded") {
		t.Fatalf("second forget: ok=%v %s", ok, errOut)
	}
	deliver(true) // the deliberate re-run
	deliver(false)
	if n := effects(); n != 2 {
		t.Fatalf("%d effects, want 2: one delivery and the re-run", n)
	}
	if _, errOut, ok := idem("show", "order-1", "--consumer", "billing"); !ok {
		t.Fatalf("show after the re-run: %s", errOut)
	}
}

// TestInboxCommandBadInput: every mistake exits non-zero with a message
// that names it, and a wrong --db or --table creates nothing.
func TestInboxCommandBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "inbox.db")
	db := testenv.Open(t, "sqlite", sqldialect.SQLiteDSN(p))
	in, err := inbox.New(db, sqldialect.SQLite, "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "", "--consumer", "billing", "--db", "sqlite:" + p}, "key"},
		{[]string{"forget", "", "--consumer", "billing", "--db", "sqlite:" + p}, "key"},
		{[]string{"show", "k", "--consumer", "", "--db", "sqlite:" + p}, "consumer"},
		{[]string{"show", "k", "--db", "sqlite:" + p}, `"consumer" not set`},
		{[]string{"show", "k", "--consumer", "billing"}, `"db" not set`},
		{[]string{"show", "k", "--consumer", "billing", "--db", "oracle://x"}, "invalid --db"},
		{[]string{"show", "k", "--consumer", "billing", "--db", "sqlite:"}, "invalid --db"},
		{[]string{"show", "k", "--consumer", "billing", "--db", "mysql://not a dsn"}, "invalid --db"},
		{[]string{"show", "k", "--consumer", "billing", "--db", "sqlite:" + missing}, "no such file"},
		{[]string{"show", "k", "--consumer", "billing", "--db", "sqlite:" + p, "--table", "other_inbox"}, "no inbox table other_inbox"},
		{[]string{"show", "k", "--consumer", "billing", "--db", "sqlite:" + p, "--table", "bad table"}, "--table"},
		{[]string{"show", "k", "--consumer", "billing", "--db", "sqlite:" + p, "-o", "xml"}, "--output"},
		{[]string{"show", "--consumer", "billing", "--db", "sqlite:" + p}, "accepts 1 arg"},
	} {
		out, errOut, ok := runIdem(t, append([]string{"inbox"}, c.args...)...)
		if ok || !strings.Contains(errOut, c.want) {
			t.Errorf("idem inbox %q: ok=%v stdout=%q stderr=%q, want a failure naming %q", c.args, ok, out, errOut, c.want)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'other_inbox%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a wrong --table created %d tables (%v)", n, err)
	}
	if _, _, ok := runIdem(t, "inbox", "show", "k", "--consumer", "billing", "--db", "sqlite:"+missing); ok {
		t.Fatal("a missing file was opened")
	}
}

// TestInboxMigrateAndSweepCommand runs idem inbox migrate-layout on a rows
// table of an earlier release, on each engine: a key recorded before is
// still a duplicate after, new keys go to buckets, a second run does
// nothing, and idem inbox sweep drops the old buckets and, once the
// migration is older than its age, the rows table.
func TestInboxMigrateAndSweepCommand(t *testing.T) {
	t.Parallel()
	for _, db := range inboxDBs {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			testInboxMigrateAndSweep(t, db)
		})
	}
}

func testInboxMigrateAndSweep(t *testing.T, idb inboxDB) {
	ctx := context.Background()
	flag, db := idb.open(t)
	old, err := inbox.New(db, idb.d, "billing", inbox.WithTable("orders_inbox"), inbox.WithLayout(inbox.LayoutRows))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, *sql.Tx) error { return nil }
	if ok, err := old.Process(ctx, "before", nop); !ok || err != nil {
		t.Fatalf("first delivery: %v %v", ok, err)
	}
	idem := func(args ...string) (string, string, bool) {
		return runIdem(t, append([]string{"inbox", "--db", flag, "--table", "orders_inbox", "--consumer", "billing"}, args...)...)
	}
	if out, errOut, ok := idem("sweep", "--older-than", "1h"); !ok || !strings.Contains(out, "deleted 0 keys of consumer billing older than 1h0m0s") {
		t.Fatalf("sweep of the rows table: ok=%v stdout=%q stderr=%q", ok, out, errOut)
	}
	if _, errOut, ok := idem("migrate-layout"); ok || !strings.Contains(errOut, "--retention or --bucket-width is required") {
		t.Fatalf("migrate-layout without a width: ok=%v %s", ok, errOut)
	}
	if _, errOut, ok := idem("migrate-layout", "--retention", "1h", "--bucket-width", "1s"); ok || !strings.Contains(errOut, "not both") {
		t.Fatalf("migrate-layout with both: ok=%v %s", ok, errOut)
	}
	out, errOut, ok := idem("migrate-layout", "--bucket-width", "1s")
	if !ok || !strings.Contains(out, "migrated orders_inbox to the bucketed layout") {
		t.Fatalf("migrate-layout: ok=%v stdout=%q stderr=%q", ok, out, errOut)
	}
	if out, _, ok := idem("migrate-layout", "--bucket-width", "1s"); !ok || !strings.Contains(out, "nothing to do") {
		t.Fatalf("second migrate-layout: ok=%v %q", ok, out)
	}
	if out, _, ok := idem("migrate-layout", "--bucket-width", "1s", "-o", "json"); !ok || strings.TrimSpace(out) != `{"table":"orders_inbox","migrated":false}` {
		t.Fatalf("migrate-layout -o json: ok=%v %q", ok, out)
	}
	// This release's Inbox: the old key is a duplicate (read in the frozen
	// rows table), a new key goes to a bucket.
	in, err := inbox.New(db, idb.d, "billing", inbox.WithTable("orders_inbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if ok, err := in.Process(ctx, "before", nop); ok || err != nil {
		t.Fatalf("the key recorded before the migration: applied=%v err=%v, want a duplicate", ok, err)
	}
	if ok, err := in.Process(ctx, "after", nop); !ok || err != nil {
		t.Fatalf("a new key: %v %v", ok, err)
	}
	rec, err := in.Inspect(ctx, "billing", "after")
	if err != nil || rec.Layout != inbox.LayoutBuckets {
		t.Fatalf("the new key: %+v %v", rec, err)
	}
	// An earlier release's insert into the frozen table fails.
	ins := "INSERT INTO orders_inbox (consumer, idem_key, fingerprint, processed_at) VALUES ('billing', 'old-release', NULL, 0)"
	switch idb.d {
	case sqldialect.Postgres:
		ins = "INSERT INTO orders_inbox (consumer, idem_key) VALUES ('billing', 'old-release') ON CONFLICT (consumer, idem_key) DO NOTHING"
	case sqldialect.MySQL:
		ins = "INSERT INTO orders_inbox (consumer, idem_key, fingerprint, processed_at) VALUES ('billing', 'old-release', NULL, UTC_TIMESTAMP(6))"
	}
	if _, err := db.ExecContext(ctx, ins); err == nil {
		t.Fatal("an insert into the frozen rows table succeeded")
	}
	// An Inbox of this release that still had the rows layout cached reads
	// the new one and records there.
	if ok, err := old.Process(ctx, "by-a-stale-inbox", nop); !ok || err != nil {
		t.Fatalf("a stale Inbox after the migration: %v %v", ok, err)
	}

	if _, errOut, ok := idem("sweep", "--older-than", "0s"); ok || !strings.Contains(errOut, "must be positive") {
		t.Fatalf("sweep --older-than 0s: ok=%v %s", ok, errOut)
	}
	if _, errOut, ok := idem("sweep"); ok || !strings.Contains(errOut, `"older-than" not set`) {
		t.Fatalf("sweep without an age: ok=%v %s", ok, errOut)
	}
	out, errOut, ok = idem("sweep", "--older-than", "1h")
	if !ok || !strings.Contains(out, "dropped 0 tables of orders_inbox") {
		t.Fatalf("sweep --older-than 1h: ok=%v stdout=%q stderr=%q", ok, out, errOut)
	}
	if out, _, ok := idem("sweep", "--older-than", "1h", "-o", "json"); !ok || strings.TrimSpace(out) != `{"table":"orders_inbox","dropped_tables":0}` {
		t.Fatalf("sweep -o json: ok=%v %q", ok, out)
	}
	if _, errOut, ok := idem("sweep", "--older-than", "1h", "-o", "xml"); ok || !strings.Contains(errOut, "--output") {
		t.Fatalf("sweep -o xml: ok=%v %s", ok, errOut)
	}
	time.Sleep(4 * time.Second) // 1 s buckets, the 2 s skew margin, the migration's age
	out, errOut, ok = idem("sweep", "--older-than", "1s")
	if !ok || !strings.Contains(out, "dropped ") || strings.Contains(out, "dropped 0 ") {
		t.Fatalf("sweep --older-than 1s: ok=%v stdout=%q stderr=%q", ok, out, errOut)
	}
	if rows, meta, err := inboxTables(ctx, db, idb.d, "orders_inbox"); err != nil || rows || !meta {
		t.Fatalf("after the sweep: rows table %v, meta %v (%v); want the rows table dropped", rows, meta, err)
	}
	// Both keys were older than the sweep's age: they are gone, and a
	// delivery now applies again (retention, as documented).
	in2, err := inbox.New(db, idb.d, "billing", inbox.WithTable("orders_inbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close()
	if ok, err := in2.Process(ctx, "after", nop); !ok || err != nil {
		t.Fatalf("a key older than the sweep's age: applied=%v err=%v, want applied", ok, err)
	}
}
