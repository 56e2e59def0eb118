package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/settest"
)

// setRecorder is a set handler that writes every record's value to the
// effects table with one multi-row INSERT and counts, per value, how often a
// committed or rolled-back call received it.
type setRecorder struct{ *settest.Recorder[*kgo.Record] }

func newSetRecorder() setRecorder {
	return setRecorder{settest.New(func(r *kgo.Record) string { return string(r.Value) })}
}

// handler is the set handler of the consumer named consumer.
func (s setRecorder) handler(consumer string) idemkafka.SetHandler {
	return s.Handler("INSERT INTO effects (id, consumer)", func(r *kgo.Record) []any { return []any{string(r.Value), consumer} })
}

// TestSetHandlerAppliesOnce: with WithSetHandler and no per-record handler,
// ids produced twice and a whole topic consumed again by a second member
// (the first member's offset commits never reached Kafka) reach the set
// handler once each: its effect is applied once, the rest are duplicates,
// and the offsets end committed.
func TestSetHandlerAppliesOnce(t *testing.T) {
	t.Parallel()
	all := ids("s", 40)
	f := newFixture(t, 2, append(all, all[:10]...)...)
	set := newSetRecorder()

	first := newTally()
	f.runCommitsRejected(f.consumer(nil, idemkafka.WithSetHandler(set.handler("1")), first.option()), first, 50)
	if a, d := first.get(idem.Applied), first.get(idem.Duplicate); a != 40 || d != 10 {
		t.Errorf("first member: applied %d, duplicates %d; want 40, 10", a, d)
	}
	f.eff.requireOnce(t, all)

	second := newTally()
	_ = runUntil(t, f.consumer(nil, idemkafka.WithSetHandler(set.handler("2")), second.option()), second, 50)
	if d := second.get(idem.Duplicate); d != 50 {
		t.Errorf("second member: %d duplicates, want 50", d)
	}
	f.eff.requireOnce(t, all)
	seen, calls := set.Snapshot()
	for _, id := range all {
		if seen[id] != 1 {
			t.Errorf("set handler received %q %d times, want 1", id, seen[id])
		}
	}
	if len(seen) != len(all) {
		t.Errorf("set handler received %d distinct values, want %d", len(seen), len(all))
	}
	if calls >= len(all) {
		t.Errorf("set handler called %d times for %d records: not batched", calls, len(all))
	}
	f.requireCommittedToEnd()
}

// TestSetHandlerPoisonFallback: a batch holding a poison record makes the set
// handler fail; the batch is replayed record by record with the Handler,
// which isolates the poison record: it is retried alone and dead-lettered,
// the others commit once, and every offset is committed.
func TestSetHandlerPoisonFallback(t *testing.T) {
	t.Parallel()
	all := []string{"p-0", "p-1", "poison", "p-2", "p-3"}
	f := newFixture(t, 1, all...)
	set := newSetRecorder()
	set.Fail = func(recs []*kgo.Record) error {
		for _, r := range recs {
			if string(r.Value) == "poison" {
				return errors.New("batch holds poison")
			}
		}
		return nil
	}
	var poisonRuns atomic.Int32
	base := f.eff.handler("1")
	each := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if string(r.Value) == "poison" {
			poisonRuns.Add(1)
			return errors.New("boom")
		}
		return base(ctx, tx, r)
	}
	ta := newTally()
	_ = runUntil(t, f.consumer(each, ta.option(), idemkafka.WithSetHandler(set.handler("1")), fastRetries(3), idemkafka.WithDeadLetter("dlq")), ta, len(all))
	f.eff.requireOnce(t, []string{"p-0", "p-1", "p-2", "p-3"})
	if a, dl := ta.get(idem.Applied), ta.get(idem.DeadLettered); a != 4 || dl != 1 {
		t.Errorf("applied %d, dead-lettered %d; want 4, 1", a, dl)
	}
	if n := poisonRuns.Load(); n != 3 {
		t.Errorf("per-record handler ran %d times on the poison record, want 3 (batch replay + 2 retries)", n)
	}
	dl := readTopic(t, f.c, "dlq", 1)
	if len(dl) != 1 || string(dl[0].Value) != "poison" {
		t.Fatalf("dead letters %v, want the poison record", dl)
	}
	if hs := headers(dl[0]); hs[idemkafka.HeaderDLQReason] != string(idem.ReasonMaxAttempts) || hs[idemkafka.HeaderDLQAttempts] != "3" || hs[idemkafka.HeaderDLQOffset] != "2" {
		t.Errorf("dead letter headers %v", hs)
	}
	f.requireCommittedToEnd()
}

// TestSetHandlerNoFallback: a set handler without a per-record Handler that
// keeps failing fails the whole batch: it is retried as a whole, then Run
// returns an error wrapping the *inbox.HandlerError; nothing is applied and
// no offset is committed. The next member consumes every record again and,
// the handler fixed, applies each once.
func TestSetHandlerNoFallback(t *testing.T) {
	t.Parallel()
	all := ids("n", 8)
	f := newFixture(t, 1, all...)
	set := newSetRecorder()
	var broken atomic.Bool
	broken.Store(true)
	set.Fail = func([]*kgo.Record) error {
		if broken.Load() {
			return errors.New("set broken")
		}
		return nil
	}
	ta := newTally()
	err := runToError(t, f.consumer(nil, ta.option(), idemkafka.WithSetHandler(set.handler("1")), fastRetries(3), idemkafka.WithDeadLetter("dlq")))
	var he *inbox.HandlerError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "set broken") {
		t.Fatalf("Run = %v, want an error wrapping *inbox.HandlerError", err)
	}
	if _, calls := set.Snapshot(); calls < 3 {
		t.Errorf("set handler called %d times, want at least 3 (first try + 2 retries)", calls)
	}
	if n := ta.total(); n != 0 {
		t.Errorf("%d outcomes reported, want 0", n)
	}
	if got := f.eff.counts(t); len(got) != 0 {
		t.Errorf("effects applied: %v", got)
	}
	if got := committed(t, f.c, "g", "orders"); len(got) != 0 {
		t.Errorf("offsets committed after a failed batch: %v", got)
	}

	// A permanent error is not retried.
	set2 := newSetRecorder()
	set2.Fail = func([]*kgo.Record) error { return idem.Permanent(errors.New("malformed")) }
	if err := runToError(t, f.consumer(nil, idemkafka.WithSetHandler(set2.handler("2")), fastRetries(3))); !idem.IsPermanent(err) {
		t.Errorf("Run = %v, want the permanent error", err)
	}
	if _, calls := set2.Snapshot(); calls != 1 {
		t.Errorf("permanent failure: set handler called %d times, want 1", calls)
	}

	broken.Store(false)
	ta3 := newTally()
	_ = runUntil(t, f.consumer(nil, idemkafka.WithSetHandler(set.handler("3")), ta3.option()), ta3, len(all))
	if a := ta3.get(idem.Applied); a != len(all) {
		t.Errorf("applied %d after the fix, want %d", a, len(all))
	}
	f.eff.requireOnce(t, all)
	f.requireCommittedToEnd()
}
