package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/keystore/memstore"
)

// TestDuplicatesApplyOnce: the same id produced twice is applied once, and
// both records are acknowledged (the committed offsets reach the log end).
func TestDuplicatesApplyOnce(t *testing.T) {
	t.Parallel()
	all := ids("a", 10)
	f := newFixture(t, 2, append(all, all[:5]...)...)
	ta := newTally()
	if err := runUntil(t, f.consumer(f.eff.handler("1"), ta.option()), ta, 15); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if a, d := ta.get(idem.Applied), ta.get(idem.Duplicate); a != 10 || d != 5 {
		t.Errorf("applied %d, duplicates %d; want 10, 5", a, d)
	}
	f.eff.requireOnce(t, all)
	f.requireCommittedToEnd()
}

// TestCrashBeforeOffsetCommit: effects commit, the offset commit never
// reaches Kafka, a new member re-consumes everything, the inbox reports
// duplicates, effects stay applied once and the offsets end committed.
func TestCrashBeforeOffsetCommit(t *testing.T) {
	t.Parallel()
	all := ids("b", 20)
	f := newFixture(t, 2, all...)
	f.block.Store(true)
	first := newTally()
	_ = runUntil(t, f.consumer(f.eff.handler("1"), first.option()), first, len(all))
	if got := committed(t, f.c, "g", "orders"); len(got) != 0 {
		t.Fatalf("offsets committed despite the broker rejecting commits: %v", got)
	}
	f.eff.requireOnce(t, all)

	f.block.Store(false)
	second := newTally()
	_ = runUntil(t, f.consumer(f.eff.handler("2"), second.option()), second, len(all))
	if d := second.get(idem.Duplicate); d != len(all) {
		t.Errorf("second member: %d duplicates, want %d (every record re-consumed)", d, len(all))
	}
	f.eff.requireOnce(t, all)
	f.requireCommittedToEnd()
}

// TestPoisonToDeadLetter: a record whose handler keeps failing is retried,
// then produced to the dead-letter topic with error headers, and the loop goes
// on; a permanent error skips the retries.
func TestPoisonToDeadLetter(t *testing.T) {
	t.Parallel()
	all := []string{"d-0", "poison", "d-1", "perm", "d-2"}
	f := newFixture(t, 1, all...)
	var poisonRuns, permRuns atomic.Int32
	base := f.eff.handler("1")
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		switch string(r.Value) {
		case "poison":
			poisonRuns.Add(1)
			return errors.New("boom")
		case "perm":
			permRuns.Add(1)
			return idem.Permanent(errors.New("malformed"))
		}
		return base(ctx, tx, r)
	}
	ta := newTally()
	_ = runUntil(t, f.consumer(h, ta.option(), fastRetries(3), idemkafka.WithDeadLetter("dlq")), ta, len(all))
	f.eff.requireOnce(t, []string{"d-0", "d-1", "d-2"})
	if n := ta.get(idem.DeadLettered); n != 2 {
		t.Errorf("%d dead-lettered, want 2", n)
	}
	// The batch runs the handler (ProcessBatch may replay it once under a
	// savepoint), then two retries run it alone.
	if n := poisonRuns.Load(); n < 3 {
		t.Errorf("poison handler ran %d times, want at least 3", n)
	}
	dl := readTopic(t, f.c, "dlq", 2)
	want := map[string]map[string]string{
		"poison": {idemkafka.HeaderDLQReason: string(idem.ReasonMaxAttempts), idemkafka.HeaderDLQAttempts: "3", idemkafka.HeaderDLQOffset: "1", idemkafka.HeaderDLQError: "boom"},
		"perm":   {idemkafka.HeaderDLQReason: string(idem.ReasonPermanent), idemkafka.HeaderDLQAttempts: "1", idemkafka.HeaderDLQOffset: "3"},
	}
	for _, r := range dl {
		w, ok := want[string(r.Value)]
		if !ok {
			t.Errorf("unexpected dead letter %q", r.Value)
			continue
		}
		hs := headers(r)
		for k, v := range w {
			if k == idemkafka.HeaderDLQError {
				if !strings.Contains(hs[k], v) {
					t.Errorf("%s: %s = %q, want it to contain %q", r.Value, k, hs[k], v)
				}
				continue
			}
			if hs[k] != v {
				t.Errorf("%s: %s = %q, want %q", r.Value, k, hs[k], v)
			}
		}
		if hs[idemkafka.HeaderDLQTopic] != "orders" || hs[idemkafka.HeaderDLQPartition] != "0" || hs[idemkafka.HeaderID] != string(r.Value) {
			t.Errorf("%s: headers %v", r.Value, hs)
		}
	}
	f.requireCommittedToEnd()
}

// TestMissingKey: a record without the key header is dead-lettered with
// reason missing-key by default; with StopOnMissing, or with no dead-letter
// topic, Run stops and the offset does not move past it.
func TestMissingKey(t *testing.T) {
	t.Parallel()
	t.Run("dead-letter", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, 1, "m-0", "", "m-1")
		ta := newTally()
		_ = runUntil(t, f.consumer(f.eff.handler("1"), ta.option(), idemkafka.WithDeadLetter("dlq")), ta, 3)
		f.eff.requireOnce(t, []string{"m-0", "m-1"})
		hs := headers(readTopic(t, f.c, "dlq", 1)[0])
		if hs[idemkafka.HeaderDLQReason] != string(idem.ReasonMissingKey) || hs[idemkafka.HeaderDLQOffset] != "1" ||
			!strings.Contains(hs[idemkafka.HeaderDLQError], idemkafka.HeaderID) {
			t.Errorf("dead letter headers %v", hs)
		}
		f.requireCommittedToEnd()
	})
	for name, tc := range map[string]struct {
		opt  idemkafka.Option
		want error
	}{
		"stop":   {idemkafka.WithMissingKey(idemkafka.StopOnMissing), idem.ErrMissingKey},
		"no-dlq": {idemkafka.WithMissingKey(idemkafka.DeadLetterMissing), idemkafka.ErrDeadLetter},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1, "s-0", "", "s-1")
			if err := runToError(t, f.consumer(f.eff.handler("1"), tc.opt)); !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			f.requireNotPast(1) // the keyless record
		})
	}
}

// TestDeadLetterProduceFails: when the dead-letter produce fails, Run stops
// with ErrDeadLetter and the poison record's offset is not committed.
func TestDeadLetterProduceFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, "f-0", "poison")
	base := f.eff.handler("1")
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if string(r.Value) == "poison" {
			return idem.Permanent(errors.New("bad"))
		}
		return base(ctx, tx, r)
	}
	if err := runToError(t, f.consumer(h, idemkafka.WithDeadLetter("no-such-topic"))); !errors.Is(err, idemkafka.ErrDeadLetter) {
		t.Fatalf("Run = %v, want ErrDeadLetter", err)
	}
	f.requireNotPast(1) // the poison record
	f.eff.requireOnce(t, []string{"f-0"})
}

// readTopic consumes n records of topic from the start.
func readTopic(t *testing.T, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := client(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: got %d records, want %d", topic, len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func headers(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// TestKeystoreMode: effects outside the database go through keystore.Do:
// a duplicate id runs the handler once, a handler that fails once is
// released and retried, and a restart before the offset commit replays.
func TestKeystoreMode(t *testing.T) {
	t.Parallel()
	all := ids("k", 10)
	f := newFixture(t, 2, append(all, all[0])...)
	f.block.Store(true)
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent := map[string]int{}
	failed := false
	h := func(_ context.Context, r *kgo.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if string(r.Value) == "k-003" && !failed {
			failed = true
			return errors.New("smtp timeout")
		}
		sent[string(r.Value)]++
		return nil
	}
	first := newTally()
	_ = runUntil(t, f.keystoreConsumer(store, h, first.option(), fastRetries(3)), first, len(all)+1)
	if a, d := first.get(idem.Applied), first.get(idem.Duplicate); a != len(all) || d != 1 {
		t.Errorf("applied %d, duplicates %d; want %d, 1", a, d, len(all))
	}
	f.block.Store(false)
	second := newTally()
	_ = runUntil(t, f.keystoreConsumer(store, h, second.option()), second, len(all)+1)
	if d := second.get(idem.Duplicate); d != len(all)+1 {
		t.Errorf("second member: %d replays, want %d", d, len(all)+1)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range all {
		if sent[id] != 1 {
			t.Errorf("%s sent %d times, want 1", id, sent[id])
		}
	}
	f.requireCommittedToEnd()
}
