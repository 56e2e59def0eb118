package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-go/idem/inbox"
)

func TestProcessBatch(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		boom := errors.New("bad message")
		msgs := make([]inbox.Message, 10)
		for i := range msgs {
			msgs[i] = inbox.Message{Key: fmt.Sprintf("m-%d", i), Value: int64(i + 1)}
		}
		failing := 3
		calls := map[string]int{}
		handler := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			calls[m.Key]++
			// The effect is written before the failure, so a rollback that
			// misses it shows in the balance.
			if err := e.credit(1, m.Value.(int64))(ctx, tx); err != nil {
				return err
			}
			if m.Key == msgs[failing].Key {
				return boom
			}
			return nil
		}
		res, err := e.in.ProcessBatch(ctx, msgs, handler)
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		for i, r := range res {
			if r.Key != msgs[i].Key {
				t.Fatalf("result %d is for %q, want %q", i, r.Key, msgs[i].Key)
			}
			if i == failing {
				if r.Applied || !errors.Is(r.Err, boom) {
					t.Fatalf("failing message: %+v", r)
				}
				continue
			}
			if !r.Applied || r.Err != nil {
				t.Fatalf("message %d: %+v, want applied", i, r)
			}
			want += msgs[i].Value.(int64)
		}
		if got := e.balance(1); got != want || e.keys() != 9 {
			t.Fatalf("balance %d keys %d, want %d and 9: the failed message's effect or key leaked", got, e.keys(), want)
		}
		// Redeliver the whole batch: only the failed message applies now.
		res, err = e.in.ProcessBatch(ctx, msgs, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			return e.credit(1, m.Value.(int64))(ctx, tx)
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Applied != (i == failing) || r.Err != nil {
				t.Fatalf("redelivery, message %d: %+v", i, r)
			}
		}
		if got := e.balance(1); got != want+msgs[failing].Value.(int64) || e.keys() != 10 {
			t.Fatalf("after redelivery balance %d keys %d", got, e.keys())
		}
	})
}

func TestProcessBatchDuplicatesWithinAndAcross(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		if _, err := e.in.Process(ctx, "old", e.credit(1, 1)); err != nil {
			t.Fatal(err)
		}
		msgs := []inbox.Message{
			{Key: "a", Fingerprint: []byte{1}}, {Key: "old"}, {Key: "a", Fingerprint: []byte{1}},
			{Key: "b"}, {Key: "a", Fingerprint: []byte{2}}, {Key: "b"},
		}
		res, err := e.in.ProcessBatch(ctx, msgs, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			return e.credit(1, 10)(ctx, tx)
		})
		if err != nil {
			t.Fatal(err)
		}
		wantApplied := []bool{true, false, false, true, false, false}
		for i, r := range res {
			if r.Applied != wantApplied[i] {
				t.Errorf("message %d (%s): applied=%v, want %v", i, r.Key, r.Applied, wantApplied[i])
			}
			if (i == 4) != errors.Is(r.Err, inbox.ErrFingerprintMismatch) {
				t.Errorf("message %d: err = %v", i, r.Err)
			}
		}
		if got := e.balance(1); got != 21 {
			t.Fatalf("balance %d, want 21", got)
		}
	})
}

func TestProcessBatchFirstOccurrenceFails(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		msgs := []inbox.Message{{Key: "a", Value: "fails"}, {Key: "a", Value: "ok"}}
		res, err := e.in.ProcessBatch(ctx, msgs, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			if m.Value == "fails" {
				return errors.New("bad payload")
			}
			return e.credit(1, 5)(ctx, tx)
		})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err == nil || res[0].Applied || !res[1].Applied || e.balance(1) != 5 {
			t.Fatalf("results %+v balance %d: the second occurrence should apply once", res, e.balance(1))
		}
	})
}

func TestProcessBatchLarge(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		msgs := make([]inbox.Message, 1203) // several multi-row inserts
		for i := range msgs {
			msgs[i].Key = fmt.Sprintf("k-%05d", i)
		}
		res, err := e.in.ProcessBatch(context.Background(), msgs, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			return e.credit(2, 1)(ctx, tx)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if !r.Applied {
				t.Fatalf("%+v not applied", r)
			}
		}
		if e.balance(2) != 1203 || e.keys() != 1203 {
			t.Fatalf("balance %d keys %d, want 1203", e.balance(2), e.keys())
		}
	})
}
