package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
)

func TestProcessBatch(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
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
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
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
			if (i == 4) != errors.Is(r.Err, idem.ErrFingerprintMismatch) {
				t.Errorf("message %d: err = %v", i, r.Err)
			}
		}
		e.wantBalance(1, 21)
	})
}

func TestProcessBatchFirstOccurrenceFails(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
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

func TestProcessBatchSet(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
		var calls int
		var seen []string
		// One statement for the whole batch: the sum of the fresh amounts.
		set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
			calls++
			var sum int64
			for _, m := range fresh {
				seen = append(seen, m.Key)
				sum += m.Value.(int64)
			}
			return e.credit(1, sum)(ctx, tx)
		}
		fp := func(s string) []byte { return []byte(s) }
		first := []inbox.Message{
			{Key: "a", Value: int64(1), Fingerprint: fp("A")},
			{Key: "b", Value: int64(10)},
			{Key: "a", Value: int64(1), Fingerprint: fp("A")}, // repeat within the batch
			{Key: "c", Value: int64(100)},
			{Key: "a", Value: int64(1), Fingerprint: fp("other")}, // repeat, another payload
		}
		res, err := e.in.ProcessBatchSet(ctx, first, set, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantApplied := []bool{true, true, false, true, false}
		for i, r := range res {
			if r.Key != first[i].Key || r.Applied != wantApplied[i] {
				t.Fatalf("result %d = %+v, want key %q applied %v", i, r, first[i].Key, wantApplied[i])
			}
			if (i == 4) != errors.Is(r.Err, idem.ErrFingerprintMismatch) || (i != 4 && r.Err != nil) {
				t.Fatalf("result %d err = %v", i, r.Err)
			}
		}
		if calls != 1 || fmt.Sprint(seen) != "[a b c]" {
			t.Fatalf("set called %d times with %v, want once with [a b c]", calls, seen)
		}
		if got := e.balance(1); got != 111 || e.keys() != 3 {
			t.Fatalf("balance %d keys %d, want 111 and 3", got, e.keys())
		}

		// Redelivery plus two new messages: only the new ones reach set.
		calls, seen = 0, nil
		second := append([]inbox.Message{{Key: "d", Value: int64(1000)}}, first[:4]...)
		second = append(second, inbox.Message{Key: "e", Value: int64(10000)}, inbox.Message{Key: "a", Fingerprint: fp("other")})
		res, err = e.in.ProcessBatchSet(ctx, second, set, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			applied := r.Key == "d" || r.Key == "e"
			if r.Applied != applied || (i == len(second)-1) != errors.Is(r.Err, idem.ErrFingerprintMismatch) {
				t.Fatalf("redelivery result %d = %+v", i, r)
			}
		}
		if calls != 1 || fmt.Sprint(seen) != "[d e]" {
			t.Fatalf("set called %d times with %v, want once with [d e]", calls, seen)
		}
		if got := e.balance(1); got != 11111 || e.keys() != 5 {
			t.Fatalf("balance %d keys %d, want 11111 and 5", got, e.keys())
		}

		// A batch of duplicates only never calls set.
		calls = 0
		if _, err := e.in.ProcessBatchSet(ctx, first[:2], set, nil); err != nil || calls != 0 {
			t.Fatalf("all duplicates: err %v, set called %d times", err, calls)
		}
	})
}

func TestProcessBatchSetFailure(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env, ctx context.Context) {
		boom := errors.New("bad message")
		msgs := make([]inbox.Message, 6)
		for i := range msgs {
			msgs[i] = inbox.Message{Key: fmt.Sprintf("m-%d", i), Value: int64(1) << i}
		}
		// The set handler writes its effect, then fails: the rollback must
		// take the effect and every key with it.
		set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
			if err := e.credit(1, 1000)(ctx, tx); err != nil {
				return err
			}
			return boom
		}
		res, err := e.in.ProcessBatchSet(ctx, msgs, set, nil)
		var he *inbox.HandlerError
		if !errors.As(err, &he) || !errors.Is(err, boom) || res != nil {
			t.Fatalf("ProcessBatchSet = %v, %v; want a *HandlerError wrapping the handler's error", res, err)
		}
		if got := e.balance(1); got != 0 || e.keys() != 0 {
			t.Fatalf("after a failed set: balance %d keys %d, want 0 and 0", got, e.keys())
		}

		// With a per-message fallback, the failing message is isolated.
		each := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			if err := e.credit(1, m.Value.(int64))(ctx, tx); err != nil {
				return err
			}
			if m.Key == "m-2" {
				return boom
			}
			return nil
		}
		res, err = e.in.ProcessBatchSet(ctx, msgs, set, each)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Applied != (i != 2) || (i == 2) != errors.Is(r.Err, boom) {
				t.Fatalf("fallback result %d = %+v", i, r)
			}
		}
		if got := e.balance(1); got != 63-4 || e.keys() != 5 {
			t.Fatalf("after the fallback: balance %d keys %d, want 59 and 5", got, e.keys())
		}

		if _, err := e.in.ProcessBatchSet(ctx, msgs, nil, each); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatalf("nil set handler: err = %v, want ErrInvalidArgument", err)
		}
	})
}

// TestProcessBatchSetConcurrentDuplicates: eight deliveries of overlapping
// batches race through two connection pools (as two consumer processes
// would). Every message is credited exactly once, and the set handlers
// together see each key once.
func TestProcessBatchSetConcurrentDuplicates(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setup(t, b)
		ctx := context.Background()
		var mu sync.Mutex
		seen := map[string]int{}
		var want int64
		batches := make([][]inbox.Message, 4)
		for i := range 12 {
			m := inbox.Message{Key: fmt.Sprintf("m-%02d", i), Value: int64(1) << i}
			want += m.Value.(int64)
			for j := range batches { // each message in two or three batches
				if i%4 == j || (i+1)%4 == j || i%3 == j {
					batches[j] = append(batches[j], m)
				}
			}
		}
		set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
			var sum int64
			for _, m := range fresh {
				sum += m.Value.(int64)
			}
			if err := e.credit(1, sum)(ctx, tx); err != nil {
				return err
			}
			// Counted only if this transaction commits: the caller adds
			// them after a nil error.
			return nil
		}
		var wg sync.WaitGroup
		for g := range 8 {
			in := e.in
			if g%2 == 1 {
				var err error
				if in, err = inbox.New(e.db2, b.d, "wallet-consumer"); err != nil {
					t.Fatal(err)
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := in.ProcessBatchSet(ctx, batches[g%4], set, nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, r := range res {
					if r.Applied {
						seen[r.Key]++
					}
				}
			}()
		}
		wg.Wait()
		for k, n := range seen {
			if n != 1 {
				t.Errorf("%s applied %d times", k, n)
			}
		}
		if got := e.balance(1); got != want || e.keys() != 12 || len(seen) != 12 {
			t.Fatalf("balance %d keys %d applied %d, want %d, 12 and 12", got, e.keys(), len(seen), want)
		}
	})
}
