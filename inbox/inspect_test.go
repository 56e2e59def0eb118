package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// Tests of Inspect and Forget (issue 15): on every layout and engine a
// forgotten key applies exactly once more, including from a sealed bucket
// behind a lookup filter and from an immutable SQLite run, and a Forget
// racing deliveries of the key never lets two of them apply.

func mustApply(t *testing.T, in *inbox.Inbox, key string, fn inbox.Handler, want bool) {
	t.Helper()
	applied, err := in.Process(context.Background(), key, fn)
	if err != nil {
		t.Fatalf("process %s: %v", key, err)
	}
	if applied != want {
		t.Fatalf("process %s: applied = %v, want %v", key, applied, want)
	}
}

func TestForgetRerunsOnce(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		fp := []byte("payload-hash")
		if _, err := e.in.ProcessMessage(ctx, inbox.Message{Key: "evt-1", Fingerprint: fp}, e.credit(1, 10)); err != nil {
			t.Fatal(err)
		}
		mustApply(t, e.in, "evt-2", e.credit(2, 1), true)
		rec, err := e.in.Inspect(ctx, "wallet-consumer", "evt-1")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Key != "evt-1" || rec.Consumer != "wallet-consumer" || !bytes.Equal(rec.Fingerprint, fp) || rec.Table == "" {
			t.Fatalf("record %+v", rec)
		}
		if e.bucketed {
			if rec.Layout != inbox.LayoutBuckets || rec.Bucket.IsZero() || rec.BucketWidth <= 0 || !strings.HasPrefix(rec.Table, "idem_inbox_k") {
				t.Fatalf("bucketed record %+v", rec)
			}
			if age := time.Since(rec.Bucket); age < 0 || age > rec.BucketWidth+time.Minute {
				t.Fatalf("bucket start %v is %v ago, width %v", rec.Bucket, age, rec.BucketWidth)
			}
		} else {
			if rec.Layout != inbox.LayoutRows || rec.Table != "idem_inbox" {
				t.Fatalf("rows record %+v", rec)
			}
			if age := time.Since(rec.RecordedAt); age < -time.Minute || age > time.Minute {
				t.Fatalf("recorded at %v, %v ago", rec.RecordedAt, age)
			}
		}
		// Another consumer's key of the same name is another key.
		if _, err := e.in.Inspect(ctx, "other-consumer", "evt-1"); !errors.Is(err, inbox.ErrNotRecorded) {
			t.Fatalf("other consumer: %v", err)
		}
		if err := e.in.Forget(ctx, "other-consumer", "evt-1"); !errors.Is(err, inbox.ErrNotRecorded) {
			t.Fatalf("forget under another consumer: %v", err)
		}
		keys := e.keys()
		if err := e.in.Forget(ctx, "wallet-consumer", "evt-1"); err != nil {
			t.Fatal(err)
		}
		if got := e.keys(); got != keys-1 {
			t.Fatalf("%d keys after forget, want %d", got, keys-1)
		}
		if _, err := e.in.Inspect(ctx, "wallet-consumer", "evt-1"); !errors.Is(err, inbox.ErrNotRecorded) {
			t.Fatalf("inspect after forget: %v", err)
		}
		if err := e.in.Forget(ctx, "wallet-consumer", "evt-1"); !errors.Is(err, inbox.ErrNotRecorded) {
			t.Fatalf("second forget: %v", err)
		}
		mustApply(t, e.in, "evt-1", e.credit(1, 10), true)
		mustApply(t, e.in, "evt-1", e.credit(1, 10), false)
		mustApply(t, e.in, "evt-2", e.credit(2, 1), false) // untouched
		e.wantBalance(1, 20)
		e.wantBalance(2, 1)
		// A second process (its own pool and Inbox) sees the key again.
		in2, err := inbox.New(e.db2, b.d, "wallet-consumer", b.opts...)
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, in2, "evt-1", e.credit(1, 10), false)
	})
}

func TestInspectForgetBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		for _, c := range []struct{ consumer, key string }{{"wallet-consumer", ""}, {"", "k"}, {"wallet-consumer", "bad\x00key"}, {"wallet-consumer", strings.Repeat("k", 300)}} {
			if _, err := e.in.Inspect(ctx, c.consumer, c.key); !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("inspect %q/%q: %v", c.consumer, c.key, err)
			}
			if err := e.in.Forget(ctx, c.consumer, c.key); !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("forget %q/%q: %v", c.consumer, c.key, err)
			}
		}
		if _, err := e.in.Inspect(ctx, "wallet-consumer", "never"); !errors.Is(err, inbox.ErrNotRecorded) {
			t.Fatalf("never recorded: %v", err)
		}
	})
}

// TestForgetSealedBucket: the key sits in a bucket that is sealed (a lookup
// filter holds it on PostgreSQL and MySQL; on SQLite it was merged into the
// bucket's one immutable run). Forget deletes it there; a second process
// whose filter and run list still hold it, and the first, redeliver it at
// once: it applies once.
func TestForgetSealedBucket(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		if b.d == sqldialect.SQLite {
			inbox.SetRunSizes(5, 2)
			t.Cleanup(func() { inbox.SetRunSizes(4096, 16) })
		}
		e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
		in2, err := inbox.New(e.db2, b.d, "wallet-consumer", inbox.WithBucketWidth(time.Second), manyReruns)
		if err != nil {
			t.Fatal(err)
		}
		waitNextBucket(time.Second)
		mustApply(t, e.in, "target", e.credit(1, 10), true)
		for i := range 12 {
			mustApply(t, e.in, fmt.Sprintf("filler-%d", i), e.credit(2, 1), true)
		}
		time.Sleep(2200 * time.Millisecond) // sealed: two widths after its start
		for i := range 12 {                 // builds the filters, flushes and merges the runs
			mustApply(t, e.in, fmt.Sprintf("later-%d", i), e.credit(2, 1), true)
			mustApply(t, in2, fmt.Sprintf("later2-%d", i), e.credit(2, 1), true)
		}
		mustApply(t, in2, "target", e.credit(1, 10), false) // in2 has it cached
		rec, err := e.in.Inspect(context.Background(), "wallet-consumer", "target")
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(rec.Bucket) < 2*time.Second {
			t.Fatalf("record %+v: bucket not sealed yet", rec)
		}
		if b.d == sqldialect.SQLite {
			if !rec.Run || !strings.Contains(rec.Table, "_r") {
				t.Fatalf("record %+v: not in a run", rec)
			}
		} else if inbox.Filters(e.in) == 0 || inbox.Filters(in2) == 0 {
			t.Fatalf("no lookup filters (%d, %d): the sealed path is not tested", inbox.Filters(e.in), inbox.Filters(in2))
		}
		if err := e.in.Forget(context.Background(), "wallet-consumer", "target"); err != nil {
			t.Fatal(err)
		}
		if b.d == sqldialect.SQLite {
			checkRunNames(t, e.db)
		}
		var applied atomic.Int32
		var wg sync.WaitGroup
		for _, in := range []*inbox.Inbox{e.in, in2, e.in, in2} {
			wg.Go(func() {
				ok, err := in.Process(context.Background(), "target", e.credit(1, 10))
				if err != nil {
					t.Error(err)
				}
				if ok {
					applied.Add(1)
				}
			})
		}
		wg.Wait()
		if applied.Load() != 1 {
			t.Fatalf("forgotten key applied %d times, want 1", applied.Load())
		}
		e.wantBalance(1, 20)
		// The fillers in the sealed bucket (and its run) are still found.
		for i := range 12 {
			mustApply(t, in2, fmt.Sprintf("filler-%d", i), e.credit(2, 1), false)
			mustApply(t, e.in, fmt.Sprintf("filler-%d", i), e.credit(2, 1), false)
		}
		e.wantBalance(2, 36)
	})
}

// checkRunNames checks that every SQLite run's name counts its keys (the
// last number), as merges and other processes' filters rely on.
func checkRunNames(t *testing.T, db *sql.DB) {
	t.Helper()
	var list sql.NullString
	if err := db.QueryRow(`SELECT group_concat(name, ' ') FROM sqlite_master WHERE type = 'table' AND name GLOB 'idem_inbox_k*_r*'`).Scan(&list); err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(list.String)
	if len(names) == 0 {
		t.Fatal("no runs")
	}
	for _, n := range names {
		var c int
		if err := db.QueryRow(`SELECT count(*) FROM ` + n).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if want := n[strings.LastIndexByte(n, '_')+1:]; fmt.Sprint(c) != want {
			t.Fatalf("run %s holds %d keys", n, c)
		}
	}
}

// TestForgetAfterMigrateLayout: a key recorded in the rows layout, whose
// table MigrateLayout then froze, is still found and forgotten there.
func TestForgetAfterMigrateLayout(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithLayout(inbox.LayoutRows))
		ctx := context.Background()
		mustApply(t, e.in, "old", e.credit(1, 10), true)
		in, err := inbox.New(e.db2, b.d, "wallet-consumer")
		if err != nil {
			t.Fatal(err)
		}
		if err := in.MigrateLayout(ctx); err != nil {
			t.Fatal(err)
		}
		mustApply(t, in, "new", e.credit(2, 1), true)
		rec, err := in.Inspect(ctx, "wallet-consumer", "old")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Layout != inbox.LayoutRows || rec.Table != "idem_inbox" || rec.RecordedAt.IsZero() {
			t.Fatalf("record in the frozen rows table: %+v", rec)
		}
		if rec, err := in.Inspect(ctx, "wallet-consumer", "new"); err != nil || rec.Layout != inbox.LayoutBuckets {
			t.Fatalf("record in a bucket: %+v %v", rec, err)
		}
		if err := in.Forget(ctx, "wallet-consumer", "old"); err != nil {
			t.Fatal(err)
		}
		mustApply(t, in, "old", e.credit(1, 10), true)
		mustApply(t, in, "old", e.credit(1, 10), false)
		mustApply(t, in, "new", e.credit(2, 1), false)
		e.wantBalance(1, 20)
	})
}

// TestForgetRacesDeliveries: Forget while deliveries of the same key run
// on two pools. Whatever the order, one more delivery after all of them
// brings the number of applications since the Forget to exactly one.
func TestForgetRacesDeliveries(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		in2, err := inbox.New(e.db2, b.d, "wallet-consumer", b.opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const rounds = 5
		for r := range rounds {
			key := fmt.Sprintf("race-%d", r)
			mustApply(t, e.in, key, e.credit(1, 1), true)
			var applied atomic.Int32
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := e.in.Forget(ctx, "wallet-consumer", key); err != nil {
					t.Error(err)
				}
			})
			for i := range 6 {
				in := []*inbox.Inbox{e.in, in2}[i%2]
				wg.Go(func() {
					ok, err := in.Process(ctx, key, e.credit(1, 1))
					if err != nil {
						t.Error(err)
					}
					if ok {
						applied.Add(1)
					}
				})
			}
			wg.Wait()
			if ok, err := e.in.Process(ctx, key, e.credit(1, 1)); err != nil {
				t.Fatal(err)
			} else if ok {
				applied.Add(1)
			}
			if applied.Load() != 1 {
				t.Fatalf("round %d: %d applications after the Forget, want 1", r, applied.Load())
			}
		}
		e.wantBalance(1, 2*rounds)
	})
}

// ExampleInbox_Forget: an operator re-runs one message on purpose. The
// next delivery of the key applies its effect again, once.
func ExampleInbox_Forget() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	in, err := inbox.New(db, sqldialect.SQLite, "account-service")
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 50 WHERE id = 42")
		return err
	}
	deliver := func() {
		applied, err := in.Process(ctx, "evt-1", credit)
		if err != nil {
			log.Fatal(err)
		}
		var balance int64
		if err := db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 42").Scan(&balance); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("applied=%v balance=%d\n", applied, balance)
	}
	deliver()
	deliver() // a duplicate

	rec, err := in.Inspect(ctx, "account-service", "evt-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("recorded in layout", rec.Layout)
	if err := in.Forget(ctx, "account-service", "evt-1"); err != nil {
		log.Fatal(err)
	}
	_, err = in.Inspect(ctx, "account-service", "evt-1")
	fmt.Println("after Forget:", errors.Is(err, inbox.ErrNotRecorded))
	deliver() // runs again
	deliver() // a duplicate again
	// Output:
	// applied=true balance=50
	// applied=false balance=50
	// recorded in layout buckets
	// after Forget: true
	// applied=true balance=100
	// applied=false balance=100
}
