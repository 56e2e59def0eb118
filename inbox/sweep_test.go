package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// age backdates every key of the consumer whose key starts with prefix.
func (e *env) age(prefix string, d time.Duration) {
	e.t.Helper()
	if e.bucketed {
		e.t.Fatal("age backdates rows: run this test with forEachRows (the bucketed layout's retention is tested in bucket_test.go)")
	}
	var q string
	switch e.d {
	case sqldialect.Postgres:
		q = fmt.Sprintf("UPDATE idem_inbox SET processed_at = processed_at - interval '%d seconds' WHERE idem_key LIKE $1", int(d.Seconds()))
	case sqldialect.SQLite:
		q = fmt.Sprintf("UPDATE idem_inbox SET processed_at = processed_at - %d WHERE idem_key LIKE ?", d.Milliseconds())
	case sqldialect.MySQL:
		q = fmt.Sprintf("UPDATE idem_inbox SET processed_at = processed_at - INTERVAL %d SECOND WHERE idem_key LIKE ?", int(d.Seconds()))
	}
	if _, err := e.db.Exec(q, prefix+"%"); err != nil {
		e.t.Fatal(err)
	}
}

func TestSweep(t *testing.T) {
	forEachRows(t, func(t *testing.T, b backend) {
		week := 7 * 24 * time.Hour
		e := setup(t, b, inbox.WithRedeliveryHorizon(week), inbox.WithRetention(8*24*time.Hour))
		ctx := context.Background()
		other, _ := inbox.New(e.db, b.d, "other-consumer")
		for i := 0; i < 10; i++ {
			for _, in := range []*inbox.Inbox{e.in, other} {
				if _, err := in.Process(ctx, fmt.Sprintf("old-%d", i), e.credit(1, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.in.Process(ctx, fmt.Sprintf("new-%d", i), e.credit(1, 1)); err != nil {
				t.Fatal(err)
			}
		}
		e.age("old-", 9*24*time.Hour)

		if _, err := e.in.Sweep(ctx, 24*time.Hour, 3); !errors.Is(err, inbox.ErrHorizon) {
			t.Fatalf("sweep inside the horizon: err = %v, want ErrHorizon", err)
		}
		if _, err := e.in.Sweep(ctx, week, 0); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatalf("batch 0: err = %v", err)
		}
		n, err := e.in.SweepExpired(ctx, 3) // 4 statements: 3+3+3+1
		if err != nil || n != 10 {
			t.Fatalf("swept %d (err %v), want 10", n, err)
		}
		if got := e.keys(); got != 20 {
			t.Fatalf("%d keys left, want 20 (10 young, 10 of the other consumer)", got)
		}
		// A swept key is new again; a young key is still a duplicate.
		if ok, _ := e.in.Process(ctx, "old-1", e.credit(1, 1)); !ok {
			t.Fatal("swept key still seen as duplicate")
		}
		if ok, _ := e.in.Process(ctx, "new-1", e.credit(1, 1)); ok {
			t.Fatal("young key swept")
		}
	})
}

func TestSweepConcurrentNodes(t *testing.T) {
	forEachRows(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		msgs := make([]inbox.Message, 300)
		for i := range msgs {
			msgs[i].Key = fmt.Sprintf("old-%d", i)
		}
		if _, err := e.in.ProcessBatch(ctx, msgs, func(context.Context, *sql.Tx, inbox.Message) error { return nil }); err != nil {
			t.Fatal(err)
		}
		e.age("old-", time.Hour)
		in2, _ := inbox.New(e.db2, b.d, "wallet-consumer")
		total := make(chan int, 2)
		for _, in := range []*inbox.Inbox{e.in, in2} {
			go func() {
				n, err := in.Sweep(ctx, time.Minute, 7)
				if err != nil {
					t.Error(err)
				}
				total <- n
			}()
		}
		if got := <-total + <-total; got != 300 || e.keys() != 0 {
			t.Fatalf("two sweepers deleted %d rows, %d left; want 300 and 0", got, e.keys())
		}
	})
}

// RunSweeper sweeps expired keys at once and then every interval, until
// its ctx ends.
func TestRunSweeper(t *testing.T) {
	e := setup(t, backends[1], inbox.WithRetention(8*24*time.Hour)) // sqlite, rows layout: keys can be backdated
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.in.RunSweeper(ctx, 0, 10); !errors.Is(err, idem.ErrInvalidArgument) {
		t.Fatalf("interval 0: %v, want ErrInvalidArgument", err)
	}
	for i := range 5 {
		if _, err := e.in.Process(ctx, fmt.Sprint("old-", i), e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	e.age("old-", 9*24*time.Hour)
	done := make(chan error, 1)
	go func() { done <- e.in.RunSweeper(ctx, 10*time.Millisecond, 2) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.keys() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d expired keys left after 10 s of sweeping", e.keys())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A key that expires later is swept at a later tick.
	if _, err := e.in.Process(ctx, "old-late", e.credit(1, 1)); err != nil {
		t.Fatal(err)
	}
	e.age("old-late", 9*24*time.Hour)
	for e.keys() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a key expired after the first sweep was never swept")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunSweeper after cancel: %v, want context.Canceled", err)
	}
}

// WithKeyText keeps each key's text in the bucketed layout; without it the
// column is NULL.
func TestKeyText(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			var opts []inbox.Option
			if keep {
				opts = append(opts, inbox.WithKeyText())
			}
			e := setup(t, backends[0], opts...) // sqlite, bucketed
			if _, err := e.in.Process(context.Background(), "order-7", e.credit(1, 1)); err != nil {
				t.Fatal(err)
			}
			var table string
			if err := e.db.QueryRow("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'idem_inbox_k[0-9]*'").Scan(&table); err != nil {
				t.Fatal(err)
			}
			var key sql.NullString
			if err := e.db.QueryRow("SELECT idem_key FROM " + table).Scan(&key); err != nil {
				t.Fatal(err)
			}
			if want := (sql.NullString{String: "order-7", Valid: true}); keep && key != want || !keep && key.Valid {
				t.Fatalf("idem_key column = %+v with WithKeyText %v", key, keep)
			}
		})
	}
}

// TestHorizonBindsEveryInbox (issue 13 case 14): the redelivery horizon used
// to live in one Inbox value, and a second Inbox of the same consumer built
// without WithRedeliveryHorizon swept keys 1 ms old. The horizon is now
// recorded with the data; every Sweep of the consumer obeys the largest one
// recorded, until it is lowered explicitly.
func TestHorizonBindsEveryInbox(t *testing.T) {
	forEachRows(t, func(t *testing.T, b backend) {
		week, day := 7*24*time.Hour, 24*time.Hour
		e := setup(t, b, inbox.WithRedeliveryHorizon(week)) // Migrate records the week
		ctx := context.Background()
		for i := range 5 {
			if _, err := e.in.Process(ctx, fmt.Sprint("young-", i), e.credit(1, 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.in.Process(ctx, fmt.Sprint("old-", i), e.credit(1, 1)); err != nil {
				t.Fatal(err)
			}
		}
		e.age("young-", 2*day)
		e.age("old-", 8*day)

		// Another process, same consumer, no option.
		bare, err := inbox.New(e.db2, b.d, "wallet-consumer")
		if err != nil {
			t.Fatal(err)
		}
		for _, age := range []time.Duration{time.Millisecond, day, week - time.Second} {
			n, err := bare.Sweep(ctx, age, 100)
			if !errors.Is(err, inbox.ErrHorizon) || n != 0 {
				t.Fatalf("Sweep(%v) by an Inbox without the option: deleted %d, err %v; want ErrHorizon and nothing deleted", age, n, err)
			}
		}
		if got := e.keys(); got != 10 {
			t.Fatalf("%d keys left after refused sweeps, want 10", got)
		}
		// At the horizon it sweeps, and only what is older.
		if n, err := bare.Sweep(ctx, week, 100); err != nil || n != 5 {
			t.Fatalf("Sweep(week): deleted %d, err %v; want the 5 old keys", n, err)
		}
		// Another consumer's horizon does not bind this one.
		other, _ := inbox.New(e.db, b.d, "other-consumer")
		if _, err := other.Sweep(ctx, time.Millisecond, 100); err != nil {
			t.Fatalf("another consumer's sweep: %v", err)
		}

		// An Inbox with a longer horizon that never calls Migrate records it
		// on its first Process, and the horizon only grows.
		longer, _ := inbox.New(e.db2, b.d, "wallet-consumer", inbox.WithRedeliveryHorizon(30*day))
		if _, err := longer.Process(ctx, "late", e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
		again, _ := inbox.New(e.db2, b.d, "wallet-consumer", inbox.WithRedeliveryHorizon(day))
		if _, err := again.Process(ctx, "later", e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := bare.Sweep(ctx, week, 100); !errors.Is(err, inbox.ErrHorizon) {
			t.Fatalf("Sweep(week) after a 30-day horizon was recorded: %v, want ErrHorizon", err)
		}
		if _, err := again.Sweep(ctx, day, 100); !errors.Is(err, inbox.ErrHorizon) {
			t.Fatalf("Sweep(day) by an Inbox configured with a day, 30 days recorded: %v, want ErrHorizon", err)
		}

		// Lowering is explicit, and refused by an Inbox configured above it.
		if err := longer.LowerRedeliveryHorizon(ctx, day); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatalf("LowerRedeliveryHorizon below the Inbox's own option: %v", err)
		}
		if err := bare.LowerRedeliveryHorizon(ctx, day); err != nil {
			t.Fatal(err)
		}
		if n, err := bare.Sweep(ctx, day, 100); err != nil || n != 5 {
			t.Fatalf("Sweep(day) after lowering to a day: deleted %d, err %v; want the 5 two-day-old keys", n, err)
		}
	})
}

// forEachRows runs f on every backend that keeps one row per key (the rows
// layout): the sweep and horizon tests backdate rows, which the bucketed
// layout does not have.
func forEachRows(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		if b.opts != nil {
			t.Run(b.name, func(t *testing.T) { f(t, b) })
		}
	}
}
