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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/adapters/internal/consume/settest"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
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
	ta.want(t, "the same ids produced twice", map[idem.Outcome]int{idem.Applied: 10, idem.Duplicate: 5})
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
	first := newTally()
	f.runCommitsRejected(f.consumer(f.eff.handler("1"), first.option()), first, len(all))
	f.eff.requireOnce(t, all)

	second := newTally()
	_ = runUntil(t, f.consumer(f.eff.handler("2"), second.option()), second, len(all))
	second.want(t, "second member (every record re-consumed)", map[idem.Outcome]int{idem.Duplicate: len(all)})
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
	ta.want(t, "", map[idem.Outcome]int{idem.DeadLettered: 2})
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
	store := dbtest.MemStore(t)
	snd := newSender("k-003", errors.New("smtp timeout"))
	h := snd.handle
	first := newTally()
	f.runCommitsRejected(f.keystoreConsumer(store, h, first.option(), fastRetries(3)), first, len(all)+1)
	first.want(t, "", map[idem.Outcome]int{idem.Applied: len(all), idem.Duplicate: 1})
	second := newTally()
	_ = runUntil(t, f.keystoreConsumer(store, h, second.option()), second, len(all)+1)
	second.want(t, "second member (replays)", map[idem.Outcome]int{idem.Duplicate: len(all) + 1})
	snd.requireOnce(t, all)
	f.requireCommittedToEnd()
}

// TestRebalanceMidBatch: a second member joins while the first is in the
// middle of a batch. The first finishes the batch, commits its marks on
// revoke, and hands partitions over; every record's effect is applied exactly
// once across both members.
func TestRebalanceMidBatch(t *testing.T) {
	t.Parallel()
	wave1 := ids("c1", 40)
	f := newFixture(t, 4, wave1...)
	c, db, eff := f.c, f.db, f.eff

	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	base := eff.handler("1")
	h1 := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		once.Do(func() {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		return base(ctx, tx, r)
	}
	t1, t2 := newTally(), newTally()
	in1, in2 := newInbox(t, db, "g"), newInbox(t, db, "g") // migrate before member 1 holds the write lock
	con1, err := idemkafka.NewConsumer(in1, h1, groupOpts(c, "g", "orders"), t1.option())
	if err != nil {
		t.Fatal(err)
	}
	stop1 := running(t, con1)
	<-entered
	con2, err := idemkafka.NewConsumer(in2, eff.handler("2"), groupOpts(c, "g", "orders"), t2.option())
	if err != nil {
		t.Fatal(err)
	}
	stop2 := running(t, con2)
	time.Sleep(300 * time.Millisecond) // let the join reach the group: the rebalance now waits for member 1
	close(release)

	// Once member 2 holds partitions, a second wave is split between both.
	waitFor(t, "wave 1", func() bool { return len(eff.counts(t)) == len(wave1) })
	adm := kadm.NewClient(client(t, c))
	waitFor(t, "both members assigned", func() bool { return membersWithPartitions(t, adm, "g") == 2 })
	wave2 := ids("c2", 40)
	produce(t, c, "orders", wave2...)
	all := append(append([]string(nil), wave1...), wave2...)
	waitFor(t, "wave 2", func() bool { return len(eff.counts(t)) == len(all) })
	time.Sleep(200 * time.Millisecond) // let stragglers (duplicates) land
	_ = stop1()
	_ = stop2()
	eff.requireOnce(t, all)
	if t2.get(idem.Applied) == 0 || t1.get(idem.Applied) == 0 {
		t.Errorf("applied by member 1: %d, member 2: %d; want both > 0", t1.get(idem.Applied), t2.get(idem.Applied))
	}
	// Member 1 committed its marks when its partitions were revoked, so
	// member 2 starts after them: no record is consumed twice.
	t2.want(t, "member 2 (duplicates: the revoke did not commit member 1's marks)", map[idem.Outcome]int{idem.Duplicate: 0})
	t.Logf("member 1: %d applied, %d duplicates; member 2: %d applied, %d duplicates",
		t1.get(idem.Applied), t1.get(idem.Duplicate), t2.get(idem.Applied), t2.get(idem.Duplicate))
	requireCommittedToEnd(t, c, "g", "orders")
}

// TestOffsetsInDatabase: the offset commits with the effect; the process
// dies after the database commit and before any Kafka commit; the restarted
// consumer seeks to the stored offset, so nothing is applied twice although no
// inbox key exists.
func TestOffsetsInDatabase(t *testing.T) {
	t.Parallel()
	wave1 := ids("f1", 30)
	f := newFixture(t, 2, wave1...)
	first := newTally()
	f.runCommitsRejected(f.offsetConsumer(f.eff.handler("1"), first.option()), first, len(wave1))
	var stored int64
	if err := f.db.QueryRow(`SELECT SUM(next_offset) FROM idem_kafka_offsets WHERE group_id = 'g'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != int64(len(wave1)) {
		t.Fatalf("stored offsets sum to %d, want %d", stored, len(wave1))
	}

	wave2 := ids("f2", 10)
	produce(t, f.c, "orders", wave2...)
	second := newTally()
	stop2 := running(t, f.offsetConsumer(f.eff.handler("2"), second.option()))
	waitFor(t, "wave 2", func() bool { return second.total() >= len(wave2) })
	time.Sleep(200 * time.Millisecond) // a re-consumed wave 1 would show up here
	_ = stop2()
	if n := second.total(); n != len(wave2) {
		t.Errorf("restarted consumer processed %d records, want %d (it must seek past wave 1)", n, len(wave2))
	}
	f.eff.requireOnce(t, append(append([]string(nil), wave1...), wave2...))
	var tables int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'idem_inbox'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("an inbox table exists; offsets mode must not use keys")
	}
	f.requireCommittedToEnd()
}

// membersWithPartitions counts the members of a stable group that hold at
// least one partition.
func membersWithPartitions(t *testing.T, adm *kadm.Client, group string) int {
	t.Helper()
	gs, err := adm.DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	g := gs[group]
	if g.State != "Stable" {
		return 0
	}
	n := 0
	for _, m := range g.Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, tp := range ca.Topics {
			if len(tp.Partitions) > 0 {
				n++
				break
			}
		}
	}
	return n
}

// TestOffsetsFenced: another member advances the stored offset while this one
// holds records fetched from the older position (a zombie's view). The
// conditional offset update fails, the batch rolls back with its effects, and
// the consumer seeks to the stored offset: records 0..4, applied by "the other
// member", are not applied again.
func TestOffsetsFenced(t *testing.T) {
	t.Parallel()
	all := ids("z", 10)
	f := newFixture(t, 1, all...)
	db := f.db
	ta := newTally()
	// The stored offset (0) exists before the consumer does: a consumer's
	// client joins its group when it is built and may read the offset at
	// once (the table is made by a consumer of another group, closed).
	setup := f.offsetConsumerWith([]kgo.Opt{kgo.ConsumerGroup("setup")}, f.eff.handler("setup"))
	setup.Close()
	if _, err := db.Exec(`INSERT INTO idem_kafka_offsets VALUES ('g', 'orders', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	// Once the consumer has read its stored offset (0) and the first
	// records are buffered in its client, before it polls them, "the
	// other member" commits offsets 0..4.
	var once sync.Once
	buffered := bufferedHook(func(*kgo.Record) {
		once.Do(func() {
			if _, err := db.Exec(`UPDATE idem_kafka_offsets SET next_offset = 5`); err != nil {
				t.Error(err)
			}
		})
	})
	con := f.offsetConsumerWith([]kgo.Opt{kgo.WithHooks(buffered)}, f.eff.handler("1"), ta.option())
	stop := running(t, con)
	// Done when the stored offset is past the last record: any record
	// applied again would have been in an earlier batch.
	waitFor(t, "the stored offset at 10", func() bool {
		var next int64
		return db.QueryRow(`SELECT next_offset FROM idem_kafka_offsets`).Scan(&next) == nil && next == 10
	})
	_ = stop()
	f.eff.requireOnce(t, all[5:])
}

// TestOffsetsFetchMovedBack: the client's fetch position moves back below
// the stored offset while the consumer owns the partition (here by
// SetOffsets; in production a reset after an out-of-range fetch does the
// same), so records the consumer applied are fetched again. Their batch
// starts below the offset the consumer stored last and is fenced: the
// consumer seeks back to the stored offset and applies only what follows.
func TestOffsetsFetchMovedBack(t *testing.T) {
	t.Parallel()
	all := ids("m", 12)
	f := newFixture(t, 1, all[:10]...)
	con := f.offsetConsumer(f.eff.handler("1"))
	stop := running(t, con)
	waitFor(t, "records 0..9 applied", func() bool { return len(f.eff.counts(t)) == 10 })
	con.Client().SetOffsets(map[string]map[int32]kgo.EpochOffset{"orders": {0: {Epoch: -1, Offset: 0}}})
	produce(t, f.c, "orders", all[10:]...)
	waitFor(t, "records 10 and 11 applied", func() bool { return len(f.eff.counts(t)) == 12 })
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	f.eff.requireOnce(t, all)
	var next int64
	if err := f.db.QueryRow(`SELECT next_offset FROM idem_kafka_offsets`).Scan(&next); err != nil || next != 12 {
		t.Errorf("stored offset %d (%v), want 12", next, err)
	}
}

// bufferedHook calls its function with each record a client buffers,
// before the record can be polled (kgo.HookFetchRecordBuffered).
type bufferedHook func(*kgo.Record)

func (h bufferedHook) OnFetchRecordBuffered(r *kgo.Record) { h(r) }

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
	first.want(t, "first member", map[idem.Outcome]int{idem.Applied: 40, idem.Duplicate: 10})
	f.eff.requireOnce(t, all)

	second := newTally()
	_ = runUntil(t, f.consumer(nil, idemkafka.WithSetHandler(set.handler("2")), second.option()), second, 50)
	second.want(t, "second member", map[idem.Outcome]int{idem.Duplicate: 50})
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
	ta.want(t, "", map[idem.Outcome]int{idem.Applied: 4, idem.DeadLettered: 1})
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
	ta3.want(t, "after the fix", map[idem.Outcome]int{idem.Applied: len(all)})
	f.eff.requireOnce(t, all)
	f.requireCommittedToEnd()
}
