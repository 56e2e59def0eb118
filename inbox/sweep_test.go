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
		e.t.Skip("backdating rows is a rows-layout test; the bucketed layout's retention is tested in bucket_test.go")
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
	forEach(t, func(t *testing.T, b backend) {
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
	forEach(t, func(t *testing.T, b backend) {
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
