package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// withFoundRows appends clientFoundRows=true to a go-sql-driver DSN: the
// driver then reports matched rows instead of changed rows.
func withFoundRows(dsn string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&clientFoundRows=true"
	}
	return dsn + "?clientFoundRows=true"
}

// TestMySQLClientFoundRows (issue 13 case 11): under clientFoundRows=true,
// INSERT … ON DUPLICATE KEY UPDATE with no change reports 1 affected row for
// a recorded key, and the inbox used to apply every duplicate. Every API
// must dedupe whatever the DSN says.
func TestMySQLClientFoundRows(t *testing.T) {
	dsn := withFoundRows(testenv.MySQLDSN(t))
	b := backend{"mysql-found-rows", sqldialect.MySQL, func(t *testing.T) (*sql.DB, *sql.DB) {
		return testenv.Open(t, "mysql", dsn), testenv.Open(t, "mysql", dsn)
	}, nil}
	e := setup(t, b)
	ctx := context.Background()
	for i, want := range []bool{true, false, false} {
		applied, err := e.in.Process(ctx, "evt-1", e.credit(1, 50))
		if err != nil || applied != want {
			t.Fatalf("Process %d: applied=%v err=%v, want applied=%v", i, applied, err, want)
		}
	}
	m := inbox.Message{Key: "evt-1", Fingerprint: []byte("other")}
	if ok, err := e.in.ProcessMessage(ctx, m, e.credit(1, 50)); ok || err != nil {
		t.Fatalf("ProcessMessage of a recorded key: applied=%v err=%v, want a duplicate", ok, err)
	}
	each := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return e.credit(1, 50)(ctx, tx) }
	set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		for range fresh {
			if err := e.credit(1, 50)(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	}
	// A batch of one recorded key, and batches mixing recorded and new keys,
	// through every batch API.
	batches := []struct {
		name string
		run  func([]inbox.Message) ([]inbox.Result, error)
	}{
		{"ProcessBatch", func(ms []inbox.Message) ([]inbox.Result, error) { return e.in.ProcessBatch(ctx, ms, each) }},
		{"ProcessBatchSet", func(ms []inbox.Message) ([]inbox.Result, error) { return e.in.ProcessBatchSet(ctx, ms, set, nil) }},
		{"ProcessBatchSet+each", func(ms []inbox.Message) ([]inbox.Result, error) { return e.in.ProcessBatchSet(ctx, ms, set, each) }},
	}
	want := int64(50)
	for _, bt := range batches {
		res, err := bt.run([]inbox.Message{{Key: "evt-1"}})
		if err != nil || len(res) != 1 || res[0].Applied {
			t.Fatalf("%s of one recorded key: %+v, %v; want a duplicate", bt.name, res, err)
		}
		fresh := "new-" + bt.name
		res, err = bt.run([]inbox.Message{{Key: "evt-1"}, {Key: fresh}, {Key: fresh}})
		if err != nil || len(res) != 3 || res[0].Applied || !res[1].Applied || res[2].Applied {
			t.Fatalf("%s of a recorded and a new key: %+v, %v; want only the new key applied", bt.name, res, err)
		}
		want += 50
		// The whole batch again: all duplicates (the fast path's insert).
		res, err = bt.run([]inbox.Message{{Key: fresh}, {Key: "evt-1"}})
		if err != nil || res[0].Applied || res[1].Applied {
			t.Fatalf("%s redelivered: %+v, %v; want duplicates", bt.name, res, err)
		}
	}
	if got := e.balance(1); got != want {
		t.Fatalf("balance = %d, want %d: duplicates were applied under clientFoundRows=true", got, want)
	}
}

// countingDB counts the transactions begun through it.
type countingDB struct {
	db    *sql.DB
	begun atomic.Int32
}

func (c *countingDB) BeginTx(ctx context.Context, o *sql.TxOptions) (*sql.Tx, error) {
	c.begun.Add(1)
	return c.db.BeginTx(ctx, o)
}

var binaryKeys = []string{"evt\x00-1", "\xff\xfe", "evt-\xc3", "\xed\xa0\x80"} // NUL, invalid bytes, truncated UTF-8, a surrogate

// TestBinaryKeys (issue 13 case 12): a key that is not valid UTF-8 or holds
// a NUL fails with ErrInvalidKey before any I/O on every dialect (it used to
// reach PostgreSQL and fail with SQLSTATE 22021 on every redelivery); in a
// batch only that message fails and the others apply. The consumer name
// obeys the same rule.
func TestBinaryKeys(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		cdb := &countingDB{db: e.db}
		in, err := inbox.New(cdb, b.d, "wallet-consumer")
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		fn := func(context.Context, *sql.Tx) error { ran = true; return nil }
		each := func(context.Context, *sql.Tx, inbox.Message) error { ran = true; return nil }
		set := func(context.Context, *sql.Tx, []inbox.Message) error { ran = true; return nil }
		for _, k := range binaryKeys {
			if ok, err := in.Process(ctx, k, fn); ok || !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("Process(%q): applied=%v err=%v, want ErrInvalidKey", k, ok, err)
			}
			if ok, err := in.ProcessMessage(ctx, inbox.Message{Key: k, Fingerprint: []byte{1}}, fn); ok || !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("ProcessMessage(%q): applied=%v err=%v, want ErrInvalidKey", k, ok, err)
			}
			for name, run := range map[string]func() ([]inbox.Result, error){
				"ProcessBatch":    func() ([]inbox.Result, error) { return in.ProcessBatch(ctx, []inbox.Message{{Key: k}}, each) },
				"ProcessBatchSet": func() ([]inbox.Result, error) { return in.ProcessBatchSet(ctx, []inbox.Message{{Key: k}}, set, each) },
			} {
				res, err := run()
				if len(res) != 1 || res[0].Applied || !errors.Is(res[0].Err, idem.ErrInvalidKey) {
					t.Errorf("%s of %q alone: %+v, %v; want its Result to carry ErrInvalidKey", name, k, res, err)
				}
			}
		}
		if n := cdb.begun.Load(); n != 0 || ran || e.keys() != 0 {
			t.Fatalf("binary keys began %d transactions, ran a handler: %v, wrote %d keys; want no I/O", n, ran, e.keys())
		}

		// Mixed with valid messages: only the binary one fails.
		credit := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return e.credit(1, 1)(ctx, tx) }
		var setGot []string
		creditSet := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
			setGot = setGot[:0]
			for _, m := range fresh {
				setGot = append(setGot, m.Key)
				if err := e.credit(1, 1)(ctx, tx); err != nil {
					return err
				}
			}
			return nil
		}
		for name, run := range map[string]func([]inbox.Message) ([]inbox.Result, error){
			"ProcessBatch":    func(ms []inbox.Message) ([]inbox.Result, error) { return in.ProcessBatch(ctx, ms, credit) },
			"ProcessBatchSet": func(ms []inbox.Message) ([]inbox.Result, error) { return in.ProcessBatchSet(ctx, ms, creditSet, nil) },
		} {
			before := e.balance(1)
			msgs := []inbox.Message{{Key: name + "-a"}, {Key: binaryKeys[0]}, {Key: name + "-b"}, {Key: binaryKeys[1]}}
			res, err := run(msgs)
			if err != nil || len(res) != 4 {
				t.Fatalf("%s mixed: %+v, %v", name, res, err)
			}
			for i, r := range res {
				bad := i%2 == 1
				if r.Key != msgs[i].Key || r.Applied == bad || bad != errors.Is(r.Err, idem.ErrInvalidKey) || (!bad && r.Err != nil) {
					t.Errorf("%s mixed, message %d (%q): %+v; want applied=%v", name, i, msgs[i].Key, r, !bad)
				}
			}
			if got := e.balance(1) - before; got != 2 {
				t.Errorf("%s mixed: %d effects, want 2", name, got)
			}
			if name == "ProcessBatchSet" && strings.Join(setGot, ",") != name+"-a,"+name+"-b" {
				t.Errorf("set handler got %v, want the two valid messages", setGot)
			}
		}
		if e.keys() != 4 {
			t.Fatalf("%d keys recorded, want 4", e.keys())
		}

		for _, c := range append(binaryKeys, "") {
			_, err := inbox.New(e.db, b.d, c)
			if !errors.Is(err, idem.ErrInvalidOption) || !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("New with consumer %q: err = %v, want ErrInvalidOption and ErrInvalidKey", c, err)
			}
		}
	})
}
