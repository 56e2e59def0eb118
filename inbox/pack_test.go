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

// TestBucketPackSealed (PostgreSQL): Sweep packs a sealed bucket's index
// once, full, while another Inbox keeps delivering new keys and duplicates
// of the bucket's keys; the packed index is smaller, every duplicate is
// still found, the leftover of a failed rebuild is dropped, and the bucket
// list accepts the extra unique index on (d) a rebuild makes for a while
// but still refuses a unique index on anything else.
func TestBucketPackSealed(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		if b.d != sqldialect.Postgres {
			return
		}
		e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
		ctx := context.Background()
		waitNextBucket(time.Second)
		const n = 10_000
		var old []inbox.Message
		for i := 0; i < n; i++ {
			old = append(old, inbox.Message{Key: uuidV4()})
		}
		apply := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return e.credit(1, 1)(ctx, tx) }
		for lo := 0; lo < n; lo += 500 {
			if _, err := e.in.ProcessBatch(ctx, old[lo:lo+500], apply); err != nil {
				t.Fatal(err)
			}
		}
		indexes := func() map[string]int64 { // bucket index → bytes
			rows, err := e.db.Query(`SELECT c.relname::text, pg_relation_size(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE starts_with(c.relname::text, 'idem_inbox_k') AND i.indisprimary`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[string]int64{}
			for rows.Next() {
				var name string
				var size int64
				if err := rows.Scan(&name, &size); err != nil {
					t.Fatal(err)
				}
				out[name] = size
			}
			return out
		}
		before := indexes()
		var full string // the bucket holding most of the keys
		var most int64
		for name, size := range before {
			if size > most {
				full, most = name, size
			}
		}
		// The leftover of a rebuild that died: an extra unique index on
		// (d), invalid. The bucket stays usable, and packing drops it.
		for _, q := range []string{
			`CREATE UNIQUE INDEX ` + full + `_ccnew ON ` + full + ` (d)`,
			`UPDATE pg_index SET indisvalid = false WHERE indexrelid = '` + full + `_ccnew'::regclass`,
		} {
			if _, err := e.db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}

		// Another Inbox delivers while the bucket seals and is packed:
		// new keys, and duplicates of the packed bucket's keys.
		other, err := inbox.New(e.db2, e.d, "wallet-consumer", inbox.WithBucketWidth(time.Second), manyReruns)
		if err != nil {
			t.Fatal(err)
		}
		var applied, dups atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var stopOnce sync.Once
		halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
		// The deliverer ends with the test, also when it fails early:
		// cleanups run last-in first-out, so before setup's closes the
		// database (a deliverer outliving a failed test wrote "sql:
		// database is closed" into it).
		t.Cleanup(halt)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				batch := []inbox.Message{{Key: fmt.Sprintf("new-%d", i)}, old[(i*7)%n], old[(i*13+1)%n]}
				res, err := other.ProcessBatch(ctx, batch, apply)
				if err != nil {
					t.Error(err)
					return
				}
				for j, r := range res {
					if r.Err != nil {
						t.Errorf("%s: %v", batch[j].Key, r.Err)
					}
					if r.Applied != (j == 0) {
						t.Errorf("%s: applied=%v", batch[j].Key, r.Applied)
					}
					if r.Applied {
						applied.Add(1)
					} else {
						dups.Add(1)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		time.Sleep(3500 * time.Millisecond) // packAfter (3) widths
		// Two packers at once (two processes' Sweeps): each bucket is
		// packed once, and neither fails.
		packer2, err := inbox.New(e.db2, e.d, "wallet-consumer")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := packer2.Process(ctx, "packer2", e.credit(2, 1)); err != nil {
			t.Fatal(err)
		}
		var packed2 int
		var err2 error
		done2 := make(chan struct{})
		go func() { defer close(done2); packed2, err2 = inbox.PackBuckets(packer2) }()
		packed, err := inbox.PackBuckets(e.in)
		<-done2
		if err != nil || err2 != nil {
			t.Fatal(err, err2)
		}
		markedCount := func() int { // buckets whose index is marked packed
			var n int
			if err := e.db.QueryRow(`SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE starts_with(c.relname::text, 'idem_inbox_k') AND i.indisprimary AND obj_description(i.indexrelid, 'pg_class') = 'idem: packed'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		marked := markedCount()
		if packed == 0 || packed+packed2 != marked {
			t.Fatalf("two packers packed %d + %d buckets, %d are marked packed: want each packed once", packed, packed2, marked)
		}
		// Packing again packs no bucket twice. Buckets keep sealing while
		// the deliverer writes (a bucket is packable 3 widths after it
		// starts, and the first packing may outlast a width on a loaded
		// machine), so packing again may pack buckets that sealed since:
		// each of those is newly marked. A bucket packed twice is not.
		if again, err := inbox.PackBuckets(e.in); err != nil {
			t.Fatalf("packing again: %v", err)
		} else if now := markedCount(); again != now-marked {
			t.Fatalf("packing again: %d packed, %d newly marked packed (%d before, %d now); want each bucket packed once", again, now-marked, marked, now)
		}
		if _, err := e.in.Sweep(ctx, time.Hour, 1); err != nil { // packs the buckets sealed since
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		halt()
		if dups.Load() == 0 || applied.Load() == 0 {
			t.Fatalf("the concurrent deliveries did not run: %d applied, %d duplicates", applied.Load(), dups.Load())
		}
		after := indexes()
		if after[full] >= before[full] {
			t.Fatalf("packed index of %s: %d bytes, before %d: not smaller", full, after[full], before[full])
		}
		t.Logf("%s: index %d → %d bytes (%.2f×)", full, before[full], after[full], float64(after[full])/float64(before[full]))
		var comment sql.NullString
		if err := e.db.QueryRow(`SELECT obj_description(i.indexrelid, 'pg_class') FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisprimary`, full).Scan(&comment); err != nil || comment.String != "idem: packed" {
			t.Fatalf("comment of %s's index: %q, %v", full, comment.String, err)
		}
		var leftovers int
		if err := e.db.QueryRow(`SELECT count(*) FROM pg_index WHERE indrelid = $1::regclass AND NOT indisvalid`, full).Scan(&leftovers); err != nil || leftovers != 0 {
			t.Fatalf("%d invalid indexes left on %s (%v)", leftovers, full, err)
		}
		// Every old key is a duplicate through a fresh Inbox (no cached
		// filters: direct lookups into the packed index).
		fresh, err := inbox.New(e.db2, e.d, "wallet-consumer", inbox.WithLookupFilterMemory(0))
		if err != nil {
			t.Fatal(err)
		}
		for lo := 0; lo < n; lo += 500 {
			res, err := fresh.ProcessBatch(ctx, old[lo:lo+500], apply)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Applied {
					t.Fatalf("%s applied again after packing", old[lo+i].Key)
				}
			}
		}
		e.wantBalance(1, n+applied.Load())

		// A unique index on anything but (d) is refused.
		if _, err := e.db.Exec(`CREATE UNIQUE INDEX ` + full + `_f ON ` + full + ` (fingerprint)`); err != nil {
			t.Fatal(err)
		}
		bad, err := inbox.New(e.db2, e.d, "wallet-consumer")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Process(ctx, "after-bad-index", e.credit(1, 1)); !errors.Is(err, inbox.ErrUnsafeTable) {
			t.Fatalf("a bucket with a unique index on fingerprint: %v, want ErrUnsafeTable", err)
		}
	})
}

// TestBucketPackingOff: WithBucketPacking(false) packs nothing.
func TestBucketPackingOff(t *testing.T) {
	forEachBucketed(t, func(t *testing.T, b backend) {
		if b.d != sqldialect.Postgres {
			return
		}
		e := setup(t, b, inbox.WithBucketWidth(time.Second), inbox.WithBucketPacking(false), manyReruns)
		ctx := context.Background()
		if _, err := e.in.Process(ctx, "k", e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3500 * time.Millisecond)
		if n, err := inbox.PackBuckets(e.in); err != nil || n != 0 {
			t.Fatalf("packing off: %d packed, %v", n, err)
		}
	})
}
