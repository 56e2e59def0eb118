package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// TestBucketDropWaitsForOpenTransaction: a delivery whose handler runs
// long holds an expired bucket (its probe read it). A Sweep's DROP waits
// for it, and while the DROP waits for its lock (MySQL's metadata lock,
// PostgreSQL's ACCESS EXCLUSIVE), every statement that reads the bucket
// queues behind it: every other delivery, since a delivery probes every
// live bucket. The Sweep must give up within its bound (nothing dropped,
// the next Sweep tries again), and a delivery made meanwhile must not wait
// for as long as the handler runs. (SQLite has one writer at a time
// anyway.)
func TestBucketDropWaitsForOpenTransaction(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		if b.opts != nil || b.d == sqldialect.SQLite {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, b, inbox.WithBucketWidth(time.Second), manyReruns)
			ctx := context.Background()
			waitNextBucket(time.Second)
			if ok, err := e.in.Process(ctx, "old", e.credit(1, 1)); !ok || err != nil {
				t.Fatal(ok, err)
			}
			time.Sleep(3200 * time.Millisecond) // past the bucket, the sweep age (1 s) and the skew margin (2 s)
			other, _ := inbox.New(e.db2, e.d, "wallet-consumer", inbox.WithLookupFilterMemory(0))
			entered, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				ok, err := other.Process(ctx, "held", func(ctx context.Context, tx *sql.Tx) error {
					close(entered)
					<-release
					return e.credit(1, 10)(ctx, tx)
				})
				if err == nil && !ok {
					err = errors.New("not applied")
				}
				done <- err
			}()
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			<-entered // its probe read the old bucket: it holds a lock on it
			swept := make(chan error, 1)
			go func() {
				_, err := e.in.Sweep(ctx, time.Second, 100)
				swept <- err
			}()
			// A delivery while the Sweep's DROP waits: it must not wait for the
			// held transaction.
			delivered := make(chan error, 1)
			go func() {
				_, err := e.in.Process(ctx, "during", e.credit(1, 100))
				delivered <- err
			}()
			const bound = 60 * time.Second // a hang guard: the lock's bound is seconds
			select {
			case err := <-swept:
				if err == nil || !strings.Contains(err.Error(), "drop") {
					t.Fatalf("Sweep while an open transaction holds the bucket: %v; want its drop to give up", err)
				}
			case <-time.After(bound):
				t.Fatalf("Sweep waited %v for a transaction holding the bucket (every delivery queues behind its DROP)", bound)
			}
			select {
			case err := <-delivered:
				if err != nil {
					t.Fatalf("delivery during the sweep: %v", err)
				}
			case <-time.After(bound):
				t.Fatalf("a delivery waited %v behind the sweep's DROP", bound)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("the delivery holding the bucket: %v", err)
			}
			e.wantBalance(1, 111)
			// Nothing holds the old bucket now: the next Sweep drops it. (The
			// held key's own bucket may be old enough by then to go too: the
			// sweep age here is one second.)
			if n, err := e.in.Sweep(ctx, time.Second, 100); err != nil || n == 0 {
				t.Fatalf("second Sweep: dropped %d, err %v", n, err)
			}
		})
	}
}
