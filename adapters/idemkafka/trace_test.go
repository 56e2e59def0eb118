package idemkafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/adapters/internal/consume/spantest"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/outbox"
)

// produceTraced writes records carrying the producer's trace context
// (traceparent), one per consumetest.TracedKeys.
func produceTraced(t *testing.T, f *fixture, traceparent string) {
	t.Helper()
	p := newProducer(t, client(t, f.c))
	for _, id := range consumetest.TracedKeys {
		r := &kgo.Record{Topic: "orders", Key: []byte(id), Value: []byte(id),
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(traceparent)}}}
		if err := p.Produce(context.Background(), id, r); err != nil {
			t.Fatal(err)
		}
	}
}

// tracedFixture is a fixture whose "orders" topic holds the traced
// records of a producer span, with the Recorder that made it (f: a fixture
// of another cluster, nil for newFixture's).
func tracedFixture(t *testing.T, f *fixture) (*spantest.Recorder, trace.SpanContext, *fixture) {
	t.Helper()
	rec := spantest.New(t)
	producer, tp := rec.Producer("orders publish")
	if f == nil {
		f = newFixture(t, 1)
	}
	produceTraced(t, f, tp)
	return rec, producer, f
}

func recordValue(r *kgo.Record) string { return string(r.Value) }

// wantTraced checks rec's spans after a traced run: under names where the
// record's own work nests.
func wantTraced(t *testing.T, rec *spantest.Recorder, producer trace.SpanContext, ta *tally, w spantest.Want) {
	t.Helper()
	ta.want(t, "", map[idem.Outcome]int{idem.Applied: 2, idem.Duplicate: 1})
	w.Producer, w.Applied, w.Failing, w.System = producer, consumetest.TracedKey, consumetest.FailingKey, "kafka"
	rec.Check(t, w)
}

// The inbox consumer: each record's span links to its producer, the inbox
// transaction nests under the partition batch's span, the copy ends
// duplicate, the handler error retried, and no span holds a key.
func TestTraceConsumer(t *testing.T) {
	t.Parallel()
	rec, producer, f := tracedFixture(t, nil)
	in := newInbox(t, f.db, "g", inbox.WithTracer(rec.Tracer))
	h := consumetest.ApplyAfter(f.eff.handler("1"), consumetest.FailFirst(recordValue, 2))
	ta := newTally()
	con, err := idemkafka.NewConsumer(in, h, groupOpts(f.c, "g", "orders"), idemkafka.WithTracer(rec.Tracer), ta.option(), fastRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	_ = runUntil(t, con, ta, 3)
	wantTraced(t, rec, producer, ta, spantest.Want{Under: "idem.inbox."})
}

// The key store consumer: the same spans, the key store's calls (wrapped
// by idemotel) under the record's span.
func TestTraceKeystoreConsumer(t *testing.T) {
	t.Parallel()
	rec, producer, f := tracedFixture(t, nil)
	mem := dbtest.MemStore(t)
	fail := consumetest.FailFirst(recordValue, 1)
	h := func(_ context.Context, r *kgo.Record) error { return fail(r) }
	ta := newTally()
	_ = runUntil(t, f.keystoreConsumer(idemotel.WrapStore(mem, rec.Tracer), h, idemkafka.WithTracer(rec.Tracer), ta.option(), fastRetries(3)), ta, 3)
	wantTraced(t, rec, producer, ta, spantest.Want{Under: "idem.keystore.", UnderMessage: true})
}

// The consumers that key nothing: the offsets consumer (one transaction
// per batch, then record by record once a handler fails) and the
// transactional one (a poll is one Kafka transaction).
func TestTraceKeyless(t *testing.T) {
	t.Parallel()
	t.Run("offsets", func(t *testing.T) {
		t.Parallel()
		rec, producer, f := tracedFixture(t, nil)
		ta := newTally()
		// The first run fails the batch's transaction, the second the
		// record's own: retried.
		h := consumetest.ApplyAfter(f.eff.handler("1"), consumetest.FailFirst(recordValue, 2))
		_ = runUntil(t, f.offsetConsumer(h, idemkafka.WithTracer(rec.Tracer), ta.option(), fastRetries(3)), ta, 3)
		rec.CheckKeyless(t, producer, "kafka")
	})
	t.Run("transactional", func(t *testing.T) {
		t.Parallel()
		rec, producer, f := tracedFixture(t, &fixture{t: t, c: txnCluster(t, "orders", "ledger")})
		fail := consumetest.FailFirst(recordValue, 1)
		h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
			if err := fail(r); err != nil {
				return nil, err
			}
			return []*kgo.Record{{Topic: "ledger", Key: r.Key, Value: r.Value}}, nil
		}
		ta := newTally()
		con, err := idemkafka.NewTransactional("inst-0", h, groupOpts(f.c, "g", "orders"), idemkafka.WithTracer(rec.Tracer), ta.option(), fastRetries(3))
		if err != nil {
			t.Fatal(err)
		}
		_ = runUntil(t, con, ta, 3)
		rec.CheckKeyless(t, producer, "kafka")
	})
}

// From the business transaction to the consumer through the outbox: the
// trace context written into the outbox message's headers with the row is
// published by the relay as record headers, and the record's span links to
// the transaction's span.
func TestTraceThroughOutbox(t *testing.T) {
	t.Parallel()
	rec := spantest.New(t)
	producer, tp := rec.Producer("checkout")
	f := newFixture(t, 1)
	o := newOutbox(t, f.db)
	ctx := context.Background()
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const id = "order-outboxed-1"
	if _, err := o.Add(ctx, tx, outbox.Message{ID: id, Topic: "orders", Payload: []byte(id), Headers: map[string]string{"traceparent": tp}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(f.db, o, newProducer(t, client(t, f.c)).OutboxPublisher())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("relay: %d published, %v", n, err)
	}
	ta := newTally()
	_ = runUntil(t, f.consumer(f.eff.handler("1"), idemkafka.WithTracer(rec.Tracer), ta.option()), ta, 1)
	rec.WantLinked(t, id, "applied", producer)
}

// A record whose traceparent is garbage, empty, or repeated is consumed as
// any other: its span links to nothing it cannot parse, and to the first
// of repeated headers.
func TestTraceBadTraceparent(t *testing.T) {
	t.Parallel()
	rec := spantest.New(t)
	producer, tp := rec.Producer("orders publish")
	f := newFixture(t, 1)
	p := newProducer(t, client(t, f.c))
	bad := map[string][]string{
		"order-garbage-1": {"00-not-a-trace-context"},
		"order-empty-01":  {""},
		"order-repeat-1":  {tp, "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"},
	}
	for id, vals := range bad {
		r := &kgo.Record{Topic: "orders", Value: []byte(id)}
		for _, v := range vals {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(v)})
		}
		if err := p.Produce(context.Background(), id, r); err != nil {
			t.Fatal(err)
		}
	}
	ta := newTally()
	_ = runUntil(t, f.consumer(f.eff.handler("1"), idemkafka.WithTracer(rec.Tracer), ta.option()), ta, len(bad))
	ta.want(t, "", map[idem.Outcome]int{idem.Applied: len(bad)})
	rec.WantLinked(t, "order-repeat-1", "applied", producer)
	for id := range bad {
		ss := rec.Consumed(id)
		if len(ss) != 1 {
			t.Fatalf("%s: %d record spans, want 1", id, len(ss))
		}
		if want := map[bool]int{true: 1, false: 0}[id == "order-repeat-1"]; len(ss[0].Links) != want {
			t.Errorf("%s: %d links (%v), want %d", id, len(ss[0].Links), ss[0].Links, want)
		}
	}
}
