package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
)

// TestBucketCreateRace: several processes, each an Inbox of its own (so
// each with its own list of buckets), deliver across bucket boundaries at
// once, so that they create the same next bucket table together. On
// PostgreSQL the loser of two concurrent CREATE TABLE IF NOT EXISTS gets an
// error (a unique violation on the catalog, or duplicate_table, depending
// on when the winner commits); losing that race must not fail a delivery.
// Every key is applied once.
func TestBucketCreateRace(t *testing.T) {
	t.Parallel()
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
		const procs, boundaries = 6, 3
		ins := make([]*inbox.Inbox, procs)
		for i := range ins {
			db := e.db
			if i%2 == 1 {
				db = e.db2
			}
			in, err := inbox.New(db, e.d, "wallet-consumer", inbox.WithBucketWidth(time.Second), manyReruns)
			if err != nil {
				t.Fatal(err)
			}
			ins[i] = in
		}
		// Deliver until the clock has passed three bucket boundaries: each
		// boundary is a moment when every process finds the newest bucket
		// current and creates the one after it.
		end := time.Now().Truncate(time.Second).Add(boundaries*time.Second + 100*time.Millisecond)
		var applied, failed atomic.Int64
		var wg sync.WaitGroup
		for p, in := range ins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(end); i++ {
					k := fmt.Sprintf("p%d-%d", p, i)
					ok, err := in.Process(context.Background(), k, func(ctx context.Context, tx *sql.Tx) error {
						return e.credit(1, 1)(ctx, tx)
					})
					if err != nil {
						if failed.Add(1) <= 5 {
							t.Errorf("delivery of %s: %v", k, err)
						}
						continue
					}
					if !ok {
						t.Errorf("new key %s reported a duplicate", k)
					}
					applied.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("%d deliveries failed", n)
		}
		e.wantBalance(1, applied.Load())
		t.Logf("%d keys applied across %d bucket boundaries by %d processes", applied.Load(), boundaries, procs)
	})
}

// TestSweepWhileDelivering: every process sweeps (as each replica of a
// service runs SweepExpired) while every process delivers, each from two
// goroutines, so expired buckets are dropped under statements that probe
// them and catalog reads that list them. On MySQL, whose information_schema
// is read live, a bucket being dropped or created was listed without its
// index and reported as an unsafe table, which failed both the sweep and
// the deliveries whose statement met the dropped bucket (1146). Nothing
// may fail, and every key is applied once.
func TestSweepWhileDelivering(t *testing.T) {
	const roundBound = 15 * time.Second // how long a round's deliveries may go on starting new ones
	t.Parallel()
	forEachBucketed(t, func(t *testing.T, b backend) {
		e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
		ctx := context.Background()
		const procs, rounds = 4, 2
		ins := make([]*inbox.Inbox, procs)
		for i := range ins {
			// A delivery whose statement meets a bucket just dropped or
			// created is rerun on the new list (nothing committed). With
			// one-second buckets the list changes about twice a second,
			// and at load 20 and more every one of the default 10 reruns
			// overlapped a change (MySQL, one run in 7): the budget is
			// sized for buckets of minutes, not for this test's. A rerun
			// that never converges still fails, after 100.
			in, err := inbox.New(e.db, e.d, "wallet-consumer", inbox.WithBucketWidth(time.Second), manyReruns)
			if err != nil {
				t.Fatal(err)
			}
			ins[i] = in
		}
		var applied, swept atomic.Int64
		deliver := func(in *inbox.Inbox, k string) {
			ok, err := in.Process(ctx, k, e.credit(1, 1))
			switch {
			case err != nil:
				t.Errorf("delivery of %s: %v", k, err)
			case !ok:
				t.Errorf("new key %s reported a duplicate", k)
			default:
				applied.Add(1)
			}
		}
		for round := range rounds {
			// Fill buckets for longer than the sweep age, so that the
			// sweeps below find some expired.
			end := time.Now().Add(2500 * time.Millisecond)
			for i := 0; time.Now().Before(end); i++ {
				deliver(ins[i%procs], fmt.Sprintf("fill%d-%d", round, i))
			}
			// Each process sweeps again and again while its deliveries
			// run, as a replica's SweepExpired does on its ticker. That
			// also bounds the live buckets, which every delivery probes
			// and lists: a bucket a second, never swept, made each
			// delivery slower the longer a loaded machine took over them,
			// until one run did not end in 9 minutes.
			//
			// The deliveries are bounded by time as well as by count: in
			// a flake run at load 21, beside the package's other parallel
			// tests on the same MySQL server, a delivery took about 7 s
			// (the goroutine dump found every deliverer waiting on the
			// server), so 40 deliveries a goroutine ran for 8 minutes
			// and the package passed its 20-minute timeout. Each
			// goroutine delivers at least twice, so that every round still
			// races drops against deliveries; on a quiet machine the 40
			// end well before the bound.
			var sweepers, deliverers sync.WaitGroup
			stop := make(chan struct{})
			began, before := time.Now(), applied.Load()
			bound := began.Add(roundBound)
			for p, in := range ins {
				sweepers.Go(func() {
					tick := time.NewTicker(200 * time.Millisecond)
					defer tick.Stop()
					for {
						n, err := in.Sweep(ctx, time.Second, 1000)
						if err != nil {
							t.Errorf("round %d: sweep by process %d: %v", round, p, err)
						}
						swept.Add(int64(n))
						select {
						case <-stop:
							return
						case <-tick.C:
						}
					}
				})
				for w := range 2 {
					deliverers.Go(func() {
						for i := 0; i < 40 && (i < 2 || time.Now().Before(bound)); i++ {
							deliver(in, fmt.Sprintf("r%d-p%d-w%d-%d", round, p, w, i))
						}
					})
				}
			}
			deliverers.Wait()
			close(stop)
			sweepers.Wait()
			if t.Failed() {
				return
			}
			t.Logf("round %d: %d deliveries in %v beside the sweeps", round, applied.Load()-before, time.Since(began).Round(time.Millisecond))
		}
		if swept.Load() == 0 {
			t.Fatal("no sweep dropped a bucket: the test did not race a drop")
		}
		e.wantBalance(1, applied.Load())
	})
}
