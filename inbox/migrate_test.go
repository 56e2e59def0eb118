package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// TestMigrateLayoutWithDeliveries moves a table of the rows layout (as an
// earlier release made it) to buckets while two consumers keep delivering
// keys, half of them duplicates of keys recorded before the migration.
// Every key must be applied exactly once; an earlier release's insert into
// the frozen table must fail; the rows table is dropped only once the
// migration is older than the sweep's age.
func TestMigrateLayoutWithDeliveries(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithLayout(inbox.LayoutRows))
		ctx := context.Background()
		const before, total = 100, 300
		for i := 0; i < before; i++ {
			if ok, err := e.in.Process(ctx, fmt.Sprint("k-", i), e.credit(1, 1)); !ok || err != nil {
				t.Fatalf("before the migration: %v %v", ok, err)
			}
		}
		// A second process that has already used the rows layout.
		other, err := inbox.New(e.db2, e.d, "wallet-consumer")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Process(ctx, "k-0", e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
		var applied atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w, in := range []*inbox.Inbox{e.in, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for round := 0; round < 2; round++ {
					for i := w; i < total; i += 2 {
						// Each worker delivers its half, then the other half:
						// every key twice, and concurrently with the other.
						k := (i + round*(total/2)) % total
						ok, err := in.Process(ctx, fmt.Sprint("k-", k), func(ctx context.Context, tx *sql.Tx) error {
							time.Sleep(time.Millisecond) // keep deliveries running across the migration
							return e.credit(1, 1)(ctx, tx)
						})
						if err != nil {
							t.Errorf("delivery of k-%d: %v", k, err)
							return
						}
						if ok {
							applied.Add(1)
						}
					}
				}
			}()
		}
		close(start)
		time.Sleep(20 * time.Millisecond)
		mig, err := inbox.New(e.db, e.d, "wallet-consumer", inbox.WithBucketWidth(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := mig.MigrateLayout(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got := applied.Load(); got != total-before {
			t.Fatalf("applied %d during the migration, want %d", got, total-before)
		}
		if got := e.balance(1); got != total {
			t.Fatalf("balance %d, want %d: a duplicate was applied or a key lost", got, total)
		}
		// Both Inbox values now write buckets.
		for _, in := range []*inbox.Inbox{e.in, other} {
			if ok, err := in.Process(ctx, "k-7", e.credit(1, 1)); ok || err != nil {
				t.Fatalf("duplicate after the migration: %v %v", ok, err)
			}
		}
		if inbox.BucketWidth(e.in) != time.Second || inbox.BucketWidth(other) != time.Second {
			t.Fatalf("after the migration: widths %v %v", inbox.BucketWidth(e.in), inbox.BucketWidth(other))
		}
		// An earlier release inserting into the rows table is refused.
		ins := "INSERT INTO idem_inbox (consumer, idem_key, fingerprint, processed_at) VALUES ('wallet-consumer', 'old-release', NULL, 0)"
		if e.d == sqldialect.Postgres {
			ins = "INSERT INTO idem_inbox (consumer, idem_key) VALUES ('wallet-consumer', 'old-release') ON CONFLICT (consumer, idem_key) DO NOTHING"
		}
		if _, err := e.db.Exec(ins); err == nil {
			t.Fatal("the frozen rows table took an insert")
		}
		// The rows table is kept while the migration is younger than the
		// sweep's age, and read: a pre-migration key is still a duplicate.
		if _, err := mig.Sweep(ctx, time.Hour, 100); err != nil {
			t.Fatal(err)
		}
		if ok, err := mig.Process(ctx, "k-1", e.credit(1, 1)); ok || err != nil {
			t.Fatalf("pre-migration key after a sweep: applied=%v err=%v", ok, err)
		}
		time.Sleep(3300 * time.Millisecond) // the sweep age (1 s) and the skew margin (2 s)
		if _, err := mig.Sweep(ctx, time.Second, 100); err != nil {
			t.Fatal(err)
		}
		var n int
		err = e.db.QueryRow("SELECT COUNT(*) FROM idem_inbox").Scan(&n)
		if err == nil {
			t.Fatalf("rows table still there (%d rows) after the horizon passed", n)
		}
		// Still working after the drop, from the Inbox that did not sweep.
		if ok, err := other.Process(ctx, "after-drop", e.credit(2, 1)); !ok || err != nil {
			t.Fatalf("after the rows table was dropped: %v %v", ok, err)
		}
	})
}

// TestMigrateRefusesUnfrozenRowsTable: applying the new SchemaSQL next to a
// table of the rows layout, without MigrateLayout, would let an earlier
// release record keys the buckets never see. Verify refuses it.
func TestMigrateRefusesUnfrozenRowsTable(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithLayout(inbox.LayoutRows))
		ctx := context.Background()
		fresh, _ := inbox.New(e.db, e.d, "wallet-consumer")
		for _, s := range fresh.SchemaSQL() {
			if _, err := e.db.Exec(s); err != nil {
				t.Fatal(err)
			}
		}
		_, err := fresh.Process(ctx, "k", func(context.Context, *sql.Tx) error { return nil })
		if !errors.Is(err, inbox.ErrUnsafeTable) {
			t.Fatalf("unfrozen rows table beside the meta table: %v", err)
		}
	})
}
