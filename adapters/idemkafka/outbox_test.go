package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/outbox"
)

var errRelayCrash = errors.New("relay died after publishing, before its mark")

// crashAfterPublish wraps p: every third round publishes and then fails, as
// a relay that dies between Publish and its mark, so the relay's mark rolls
// back and the batch is published again.
func crashAfterPublish(p outbox.Publisher, crashes *atomic.Int64) outbox.Publisher {
	var round atomic.Int64
	return outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		if err := p.Publish(ctx, msgs); err != nil {
			return err
		}
		if round.Add(1)%3 == 1 {
			crashes.Add(1)
			return errRelayCrash
		}
		return nil
	})
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

type delivery struct {
	id, key string
	outcome idem.Outcome
	at      time.Time
}

// TestOutboxRelayToConsumer: business transactions add 50 messages over 5
// keys; a relay publishes them through OutboxPublisher and "dies" after
// publishing in a third of its rounds; an inbox consumer applies them. Every
// message is applied exactly once, the topic holds duplicates, and per key
// the applications (and the first copies in the log) follow Add order.
func TestOutboxRelayToConsumer(t *testing.T) {
	t.Parallel()
	const keys, perKey = 5, 10
	c := cluster(t, 3, "orders")
	ctx := context.Background()

	// Producing service: business table and outbox in one database.
	pdb := testenv.SQLite(t)
	ob := newOutbox(t, pdb)
	if _, err := pdb.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, version INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	// Consuming service: inbox, a per-id counter and an application log.
	cdb := testenv.SQLite(t)
	if _, err := cdb.Exec(`CREATE TABLE applied (id TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := cdb.Exec(`CREATE TABLE applied_log (ord INTEGER PRIMARY KEY AUTOINCREMENT, msg_key TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		id := header(r, idemkafka.HeaderID)
		seq, err := strconv.ParseInt(header(r, idemkafka.HeaderOutboxSeq), 10, 64)
		if err != nil {
			return fmt.Errorf("seq header: %w", err)
		}
		if header(r, "type") != "Deposited" {
			return fmt.Errorf("record %s lost its message headers: %v", id, r.Headers)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO applied (id, n) VALUES (?, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO applied_log (msg_key, id, seq) VALUES (?, ?, ?)`, string(r.Key), id, seq)
		return err
	}
	var mu sync.Mutex
	var log []delivery // every record the consumer saw, in outcome order
	con, err := idemkafka.NewConsumer(newInbox(t, cdb, "g"), handler, groupOpts(c, "g", "orders"),
		idemkafka.WithObserver(func(e idemkafka.Event) {
			r, o, err := e.Msg, e.Outcome, e.Err
			mu.Lock()
			log = append(log, delivery{id: header(r, idemkafka.HeaderID), key: string(r.Key), outcome: o, at: time.Now()})
			mu.Unlock()
			if err != nil {
				t.Errorf("record %d/%d: %v: %v", r.Partition, r.Offset, o, err)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	stopConsumer := running(t, con)
	// Wait for the assignment, so the latency below is not the group join.
	adm := kadm.NewClient(client(t, c))
	waitFor(t, "the consumer to join", func() bool { return membersWithPartitions(t, adm, "g") == 1 })

	// The relay, with crash injection, woken by the writers.
	prod := newProducer(t, client(t, c))
	var crashes atomic.Int64
	wake := make(chan struct{}, 1)
	relay, err := outbox.NewRelay(pdb, ob, crashAfterPublish(prod.OutboxPublisher(), &crashes),
		outbox.WithBatch(8), outbox.WithPoll(5*time.Millisecond), outbox.WithWakeup(wake))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = relay.Run(rctx) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	// Business transactions: one writer per key, each deposit updates the
	// account and adds its message in one transaction. The first half of
	// each key's deposits come in a burst (large relay batches mixing keys),
	// the second half 10 ms apart (commit → applied latency without a
	// backlog).
	var committedAt, paced sync.Map // id → time.Time, id → true
	added := make([][]string, keys)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("acct-%d", k)
			for n := range perKey {
				tx, err := pdb.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, version) VALUES (?, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1`, key); err != nil {
					_ = tx.Rollback()
					t.Error(err)
					return
				}
				got, err := ob.Add(ctx, tx, outbox.Message{Topic: "orders", OrderingKey: key, Payload: fmt.Appendf(nil, "%s:%d", key, n), Headers: map[string]string{"type": "Deposited"}})
				if err != nil {
					_ = tx.Rollback()
					t.Error(err)
					return
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
					return
				}
				committedAt.Store(got[0], time.Now())
				added[k] = append(added[k], got[0])
				select {
				case wake <- struct{}{}:
				default:
				}
				if n >= perKey/2 {
					paced.Store(got[0], true)
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	waitFor(t, "the relay to drain the outbox", func() bool {
		var n int
		if err := pdb.QueryRow(`SELECT COUNT(*) FROM idem_outbox WHERE sent_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	stopRelay()
	<-relayDone
	total := 0
	_, end := offsets(t, c, "g", "orders")
	for _, e := range end {
		total += int(e)
	}
	waitFor(t, "the consumer to see every record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(log) >= total
	})
	if err := stopConsumer(); !errors.Is(err, context.Canceled) {
		t.Fatalf("consumer Run = %v, want context.Canceled", err)
	}

	// Republication happened, and the consumer absorbed it.
	const want = keys * perKey
	if crashes.Load() == 0 {
		t.Fatal("no crash was injected")
	}
	applied, dups := 0, 0
	for _, d := range log {
		switch d.outcome {
		case idem.Applied:
			applied++
		case idem.Duplicate:
			dups++
		}
	}
	if total <= want || applied != want || dups != total-want {
		t.Errorf("log holds %d records, consumer applied %d and found %d duplicates; want > %d records, %d applied, the rest duplicates", total, applied, dups, want, want)
	}
	t.Logf("%d messages, %d injected crashes, %d records in the topic, %d duplicates absorbed", want, crashes.Load(), total, dups)

	// Every message applied exactly once.
	counts := countRows(t, cdb, `SELECT id, n FROM applied`)
	for _, ids := range added {
		for _, id := range ids {
			if counts[id] != 1 {
				t.Errorf("message %s applied %d times, want 1", id, counts[id])
			}
			delete(counts, id)
		}
	}
	if len(counts) != 0 {
		t.Errorf("unexpected applications: %v", counts)
	}

	// Per key, applications and first deliveries follow Add order, and the
	// outbox seq header increases.
	rows, err := cdb.Query(`SELECT msg_key, id, seq FROM applied_log ORDER BY ord`)
	if err != nil {
		t.Fatal(err)
	}
	appliedOrder := map[string][]string{}
	lastSeq := map[string]int64{}
	for rows.Next() {
		var key, id string
		var seq int64
		if err := rows.Scan(&key, &id, &seq); err != nil {
			t.Fatal(err)
		}
		if seq <= lastSeq[key] {
			t.Errorf("key %s: seq %d applied after %d", key, seq, lastSeq[key])
		}
		lastSeq[key] = seq
		appliedOrder[key] = append(appliedOrder[key], id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	firstSeen := map[string][]string{}
	seen := map[string]bool{}
	for _, d := range log {
		if !seen[d.id] {
			seen[d.id] = true
			firstSeen[d.key] = append(firstSeen[d.key], d.id)
		}
	}
	for k, ids := range added {
		key := fmt.Sprintf("acct-%d", k)
		if !slices.Equal(appliedOrder[key], ids) {
			t.Errorf("key %s: applied in order %v, added in order %v", key, appliedOrder[key], ids)
		}
		if !slices.Equal(firstSeen[key], ids) {
			t.Errorf("key %s: first copies delivered in order %v, added in order %v", key, firstSeen[key], ids)
		}
	}

	// Commit → applied latency (the outcome is reported after the
	// consumer's transaction commits).
	var burst, steady []time.Duration
	for _, d := range log {
		if d.outcome != idem.Applied {
			continue
		}
		at, _ := committedAt.Load(d.id)
		l := d.at.Sub(at.(time.Time))
		if _, ok := paced.Load(d.id); ok {
			steady = append(steady, l)
		} else {
			burst = append(burst, l)
		}
	}
	t.Logf("commit → applied, paced writes: %s; burst: %s", percentiles(steady), percentiles(burst))
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p90 %v, max %v (n=%d)", r(ds[len(ds)/2]), r(ds[len(ds)*9/10]), r(ds[len(ds)-1]), len(ds))
}

// TestOutboxPublisherRecords: the record carries the key, payload, the
// message headers, idem-id and idem-outbox-seq (which win over message
// headers of the same names); invalid messages produce nothing.
func TestOutboxPublisherRecords(t *testing.T) {
	t.Parallel()
	c := cluster(t, 2, "orders")
	pub := newProducer(t, client(t, c)).OutboxPublisher()
	ctx := context.Background()
	if err := pub.Publish(ctx, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if err := pub.Publish(ctx, []outbox.Message{{ID: "a", Topic: "orders"}, {ID: "", Topic: "orders"}}); err == nil {
		t.Fatal("a message without an id was accepted")
	}
	if err := pub.Publish(ctx, []outbox.Message{{ID: "b"}}); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("no topic: %v", err)
	}
	msgs := []outbox.Message{
		{ID: "m1", Topic: "orders", OrderingKey: "k", Payload: []byte("p1"), Seq: 7, Headers: map[string]string{"z": "1", "a": "2", idemkafka.HeaderID: "forged", idemkafka.HeaderOutboxSeq: "0"}},
		{ID: "m2", Topic: "orders", Payload: []byte("p2"), Seq: 8},
	}
	if err := pub.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	cl := client(t, c, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	var got []*kgo.Record
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	for len(got) < 2 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	if len(got) != 2 {
		t.Fatalf("read %d records, want 2 (the invalid publishes must not produce)", len(got))
	}
	slices.SortFunc(got, func(a, b *kgo.Record) int { return int(a.Value[1]) - int(b.Value[1]) })
	var hs []string
	for _, h := range got[0].Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	if want := []string{"a=2", "z=1", "idem-id=m1", "idem-outbox-seq=7"}; string(got[0].Key) != "k" || string(got[0].Value) != "p1" || !slices.Equal(hs, want) {
		t.Errorf("record 1: key %q value %q headers %v; want k, p1, %v", got[0].Key, got[0].Value, hs, want)
	}
	if got[1].Key != nil || header(got[1], idemkafka.HeaderID) != "m2" || header(got[1], idemkafka.HeaderOutboxSeq) != "8" {
		t.Errorf("record 2: key %q headers %v", got[1].Key, got[1].Headers)
	}
}

// TestTransactMixedInboxOutputIDs is the mixed shape that a Kafka
// transaction cannot cover: a handler with a database effect that also
// produces to Kafka. The database effect goes through an inbox; the output
// carries OutputID, stable across runs. The handler's first run for one
// payment fails after its output is in Kafka (the window between the produce
// and the database commit, where a crash would land too): the database
// rolls back, the record is retried, and the output is produced again. The
// topic then holds copies with one id, and a downstream inbox consumer
// applies each output once.
func TestTransactMixedInboxOutputIDs(t *testing.T) {
	t.Parallel()
	c := cluster(t, 1, "payments", "ledger")
	pays := ids("m", 10)
	produce(t, c, "payments", pays...)
	pcl := client(t, c)

	upDB := testenv.SQLite(t)
	upEff := newEffects(t, upDB)
	apply := upEff.handler("up")
	var failed atomic.Bool
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if err := apply(ctx, tx, r); err != nil {
			return err
		}
		id, err := idemkafka.OutputID("billing", r, 0)
		if err != nil {
			return err
		}
		out := &kgo.Record{Topic: "ledger", Key: r.Key, Value: r.Value}
		idemkafka.SetID(out, id)
		if err := pcl.ProduceSync(ctx, out).FirstErr(); err != nil {
			return err
		}
		if string(r.Value) == pays[3] && failed.CompareAndSwap(false, true) {
			return errors.New("database commit lost after the produce")
		}
		return nil
	}
	up := newTally()
	con, err := idemkafka.NewConsumer(newInbox(t, upDB, "billing"), h, groupOpts(c, "billing", "payments"),
		up.option(), idemkafka.WithMaxAttempts(3), idemkafka.WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = runUntil(t, con, up, len(pays))
	upEff.requireOnce(t, pays)
	// The failed run's output, and those of any run the inbox replayed, are
	// in the topic: the inbox replays a failed batch one record at a time.
	copies := len(readAll(t, c, "ledger", false))
	if copies <= len(pays) {
		t.Fatalf("ledger holds %d records for %d payments: no output was produced twice", copies, len(pays))
	}

	downDB := testenv.SQLite(t)
	downEff := newEffects(t, downDB)
	down := newTally()
	dcon, err := idemkafka.NewConsumer(newInbox(t, downDB, "ledger-reader"), downEff.handler("down"),
		groupOpts(c, "ledger-reader", "ledger"), down.option())
	if err != nil {
		t.Fatal(err)
	}
	_ = runUntil(t, dcon, down, copies)
	downEff.requireOnce(t, pays)
	down.want(t, "downstream", map[idem.Outcome]int{idem.Applied: len(pays), idem.Duplicate: copies - len(pays)})
}
