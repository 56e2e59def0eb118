package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/sqldialect"
)

// Tests of the bucketed layout (issue 14) and of MigrateLayout, which moves
// a rows table to it. They run on every engine.

func forEachBucketed(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		if b.opts != nil {
			continue
		}
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// waitNextBucket sleeps until the clock is early in a bucket of width w,
// so a test that needs "the same bucket" has most of one.
func waitNextBucket(w time.Duration) {
	time.Sleep(w - time.Duration(time.Now().UnixNano())%w + 50*time.Millisecond)
}

// TestBucketBoundaryConcurrentDuplicate is the trap that made a
// hand-partitioned table apply duplicates: two deliveries of one key, in
// flight at once, whose transactions choose different buckets (the second
// Inbox's clock is one bucket ahead, as at a boundary). A unique index per
// bucket cannot see across buckets; the inbox must. Both orders, and an
// Inbox one bucket behind.
func TestBucketBoundaryConcurrentDuplicate(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithBucketWidth(time.Hour))
		ctx := context.Background()
		for i, skew := range []time.Duration{time.Hour, -time.Hour, time.Hour, -time.Hour} {
			first := e.in
			second, err := inbox.New(e.db2, e.d, "wallet-consumer")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := second.Process(ctx, fmt.Sprint("warm-", i), func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			inbox.SkewClock(second, skew)
			if i >= 2 {
				first, second = second, first // the skewed Inbox delivers first
			}
			key := fmt.Sprint("evt-", i)
			entered, release := make(chan struct{}), make(chan struct{})
			var applied atomic.Int32
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				ok, err := first.Process(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
					close(entered)
					<-release // hold the first delivery open across the second
					return e.credit(1, 10)(ctx, tx)
				})
				if err != nil {
					t.Error(err)
				}
				if ok {
					applied.Add(1)
				}
			}()
			<-entered
			go func() {
				defer wg.Done()
				ok, err := second.Process(ctx, key, e.credit(1, 10))
				if err != nil {
					t.Error(err)
				}
				if ok {
					applied.Add(1)
				}
			}()
			time.Sleep(200 * time.Millisecond) // let the second reach its insert
			close(release)
			wg.Wait()
			if applied.Load() != 1 {
				t.Fatalf("case %d (skew %v): applied %d times, want once", i, skew, applied.Load())
			}
		}
		e.wantBalance(1, 40)
	})
}

// TestBucketManyConcurrentDuplicates runs many deliveries of the same keys
// from two pools whose clocks straddle a boundary, with real handlers.
func TestBucketManyConcurrentDuplicates(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithBucketWidth(time.Hour))
		ctx := context.Background()
		ahead := inboxtest.Migrated(t, e.db2, e.d, "wallet-consumer")
		inbox.SkewClock(ahead, time.Hour)
		const keys, copies = 40, 4
		var wg sync.WaitGroup
		var applied atomic.Int32
		for c := 0; c < copies; c++ {
			for _, in := range []*inbox.Inbox{e.in, ahead} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < keys; k += 4 {
						msgs := []inbox.Message{}
						for j := k; j < k+4; j++ {
							msgs = append(msgs, inbox.Message{Key: fmt.Sprint("k-", (j+c*7)%keys)})
						}
						res, err := in.ProcessBatchSet(ctx, msgs, func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
							time.Sleep(time.Millisecond)
							return e.credit(1, int64(len(fresh)))(ctx, tx)
						}, nil)
						if err != nil {
							t.Error(err)
							return
						}
						for _, r := range res {
							if r.Applied {
								applied.Add(1)
							}
						}
					}
				}()
			}
		}
		wg.Wait()
		if applied.Load() != keys || e.balance(1) != keys || e.keys() != keys {
			t.Fatalf("applied %d, balance %d, keys %d; want %d each", applied.Load(), e.balance(1), e.keys(), keys)
		}
	})
}

// TestBucketDuplicateOlderThanNewest: a key recorded buckets ago is found
// when it comes again, with its fingerprint.
func TestBucketDuplicateOlderThanNewest(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
		ctx := context.Background()
		waitNextBucket(time.Second)
		if ok, err := e.in.ProcessMessage(ctx, inbox.Message{Key: "old", Fingerprint: []byte("a")}, e.credit(1, 5)); !ok || err != nil {
			t.Fatalf("first delivery: %v %v", ok, err)
		}
		time.Sleep(2200 * time.Millisecond) // two buckets later
		if ok, err := e.in.Process(ctx, "new", e.credit(1, 1)); !ok || err != nil {
			t.Fatalf("new key: %v %v", ok, err)
		}
		ok, err := e.in.ProcessMessage(ctx, inbox.Message{Key: "old", Fingerprint: []byte("a")}, e.credit(1, 5))
		if ok || err != nil {
			t.Fatalf("duplicate two buckets later: applied=%v err=%v", ok, err)
		}
		res, err := e.in.ProcessBatch(ctx, []inbox.Message{{Key: "old", Fingerprint: []byte("b")}, {Key: "new"}, {Key: "fresh"}},
			func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return e.credit(1, 100)(ctx, tx) })
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(res[0].Err, idem.ErrFingerprintMismatch) || res[1].Applied || !res[2].Applied {
			t.Fatalf("batch: %+v", res)
		}
		e.wantBalance(1, 106)
	})
}

// TestBucketDuplicatesInManySealedBuckets: keys recorded in several
// buckets that have since sealed (and got lookup filters) come again in one
// batch with new keys. Every old key must be found in its own bucket (one
// statement looks up the filters' "maybe"s of every bucket) and every new
// key applied once.
func TestBucketDuplicatesInManySealedBuckets(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
		ctx := context.Background()
		const old = 4
		waitNextBucket(time.Second)
		for i := 0; i < old; i++ {
			if ok, err := e.in.Process(ctx, fmt.Sprintf("old-%d", i), e.credit(1, 1)); !ok || err != nil {
				t.Fatalf("first delivery %d: %v %v", i, ok, err)
			}
			time.Sleep(time.Second)
		}
		time.Sleep(2 * time.Second) // the last old key's bucket seals
		var msgs []inbox.Message
		for i := old - 1; i >= 0; i-- {
			msgs = append(msgs, inbox.Message{Key: fmt.Sprintf("old-%d", i)}, inbox.Message{Key: fmt.Sprintf("new-%d", i)})
		}
		for round := 0; round < 2; round++ { // the second round builds the filters first
			res, err := e.in.ProcessBatch(ctx, msgs, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return e.credit(1, 100)(ctx, tx) })
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if want := round == 0 && strings.HasPrefix(msgs[i].Key, "new-"); r.Applied != want || r.Err != nil {
					t.Fatalf("round %d, %s: applied=%v err=%v, want applied=%v", round, msgs[i].Key, r.Applied, r.Err, want)
				}
			}
		}
		if n := inbox.Filters(e.in); b.d != sqldialect.SQLite && n < old-1 {
			t.Fatalf("%d lookup filters, want at least %d", n, old-1)
		}
		e.wantBalance(1, old+100*old)
	})
}

// TestBucketRetentionHonoursHorizon: dropping buckets obeys the largest
// horizon any consumer of the table recorded, and never drops a bucket
// holding a key younger than the sweep's age.
func TestBucketRetentionHonoursHorizon(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
		ctx := context.Background()
		// Another consumer of the same table records a one-hour horizon.
		other := inboxtest.Migrated(t, e.db2, e.d, "other-consumer", inbox.WithRedeliveryHorizon(time.Hour))
		for i := 0; i < 20; i++ {
			if _, err := e.in.Process(ctx, fmt.Sprint("a-", i), e.credit(1, 1)); err != nil {
				t.Fatal(err)
			}
		}
		// Past the last key's bucket end (1 s), the sweep age (1 s) and the
		// clock-skew margin (2 s).
		time.Sleep(4300 * time.Millisecond)
		before := e.keys()
		if _, err := e.in.Sweep(ctx, time.Second, 100); !errors.Is(err, inbox.ErrHorizon) {
			t.Fatalf("sweep below another consumer's horizon: %v", err)
		}
		if e.keys() != before {
			t.Fatal("a refused sweep dropped keys")
		}
		if err := other.LowerRedeliveryHorizon(ctx, 0); err == nil {
			t.Fatal("lowering below the Inbox's own option must be refused")
		}
		plain, _ := inbox.New(e.db2, e.d, "other-consumer")
		if err := plain.LowerRedeliveryHorizon(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		// Young keys: a key recorded just now survives any sweep.
		if _, err := e.in.Process(ctx, "young", e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
		n, err := e.in.Sweep(ctx, time.Second, 100)
		if err != nil || n == 0 {
			t.Fatalf("sweep of old buckets: dropped %d, err %v", n, err)
		}
		if got := e.keys(); got != 1 {
			t.Fatalf("%d keys left, want the young one", got)
		}
		if ok, err := e.in.Process(ctx, "young", e.credit(1, 1)); ok || err != nil {
			t.Fatalf("young key after sweep: applied=%v err=%v", ok, err)
		}
		// A sweep with a longer age than the buckets' drops nothing.
		if n, err := e.in.Sweep(ctx, time.Hour, 100); n != 0 || err != nil {
			t.Fatalf("sweep 1h: %d %v", n, err)
		}
		// Another Inbox whose bucket list is stale still works.
		if ok, err := other.Process(ctx, "x", e.credit(2, 1)); !ok || err != nil {
			t.Fatalf("stale Inbox after a drop: %v %v", ok, err)
		}
	})
}

// TestBucketRepeatableReadRefused: on PostgreSQL the bucketed layout needs
// READ COMMITTED; at a stricter default the first insert fails loudly.
func TestBucketRepeatableReadRefused(t *testing.T) {
	b := backends[2]
	e := setup(t, b)
	ctx := context.Background()
	conn, err := e.db2.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET default_transaction_isolation = 'repeatable read'"); err != nil {
		t.Fatal(err)
	}
	in, _ := inbox.New(conn, b.d, "wallet-consumer")
	if _, err := in.Process(ctx, "k", e.credit(1, 1)); !errors.Is(err, inbox.ErrUnsafeTable) || !strings.Contains(err.Error(), "READ COMMITTED") {
		t.Fatalf("repeatable read: %v", err)
	}
	if e.balance(1) != 0 {
		t.Fatal("applied")
	}
}

// TestBucketFilterWaitsForOpenWriters: a lookup filter summarises a bucket
// no statement writes to any more, but a transaction that inserted into it
// earlier may still be open. The filter must include its key (the reader
// waits for it), or the key's duplicate would skip the bucket and be
// applied again. With filters off, the same duplicate is found by a direct
// lookup.
func TestBucketFilterWaitsForOpenWriters(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		for _, mem := range []int64{1 << 20, 0} {
			e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
			ctx := context.Background()
			waitNextBucket(time.Second)
			done := make(chan bool)
			go func() {
				ok, err := e.in.Process(ctx, "slow", func(ctx context.Context, tx *sql.Tx) error {
					time.Sleep(2600 * time.Millisecond) // open past the bucket's sealing (2 widths)
					return e.credit(1, 1)(ctx, tx)
				})
				if err != nil {
					t.Error(err)
				}
				done <- ok
			}()
			time.Sleep(2300 * time.Millisecond)
			other, err := inbox.New(e.db2, e.d, "wallet-consumer", inbox.WithLookupFilterMemory(mem))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := other.Process(ctx, "other", e.credit(2, 1)); err != nil {
				t.Fatal(err)
			}
			if ok := <-done; !ok {
				t.Fatal("the slow first delivery was not applied")
			}
			if ok, err := other.Process(ctx, "slow", e.credit(1, 1)); ok || err != nil {
				t.Fatalf("filters %d B: duplicate of a key committed after its bucket sealed: applied=%v err=%v", mem, ok, err)
			}
			if got := inbox.Filters(other); (mem > 0) != (got > 0) {
				t.Fatalf("filters %d B: %d filters built", mem, got)
			}
			if e.balance(1) != 1 {
				t.Fatalf("balance %d, want 1", e.balance(1))
			}
		}
	})
}

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
		mig, err := inbox.New(e.db, e.d, "wallet-consumer", inbox.WithBucketWidth(time.Second), manyReruns)
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
		switch e.d {
		case sqldialect.Postgres:
			ins = "INSERT INTO idem_inbox (consumer, idem_key) VALUES ('wallet-consumer', 'old-release') ON CONFLICT (consumer, idem_key) DO NOTHING"
		case sqldialect.MySQL:
			ins = "INSERT INTO idem_inbox (consumer, idem_key, fingerprint, processed_at) VALUES ('wallet-consumer', 'old-release', NULL, UTC_TIMESTAMP(6))"
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
