package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
)

// TestHorizonBindsEveryInbox (issue 13 case 14): the redelivery horizon used
// to live in one Inbox value, and a second Inbox of the same consumer built
// without WithRedeliveryHorizon swept keys 1 ms old. The horizon is now
// recorded with the data; every Sweep of the consumer obeys the largest one
// recorded, until it is lowered explicitly.
func TestHorizonBindsEveryInbox(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
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
