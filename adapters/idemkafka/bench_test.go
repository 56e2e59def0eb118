package idemkafka_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/settest"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

const benchRecords = 20000

// BenchmarkConsume compares, in one run and against one kfake cluster, the
// raw consume rate of a franz-go group consumer (poll, mark, no database) with
// idemkafka's loop:
//
//   - inbox: inbox mode, ProcessBatch on SQLite with one INSERT per record as
//     the effect, random-looking keys (the "bench" topic);
//   - offsets: offsets-in-database mode (the effects and the offset in one
//     transaction, no key per record);
//   - set-random: inbox mode with WithSetHandler (ProcessBatchSet; the effect
//     is one multi-row INSERT per batch), random-looking keys;
//   - set-ordered: the same with time-ordered keys (UUIDv7-like text: 48-bit
//     millisecond timestamp, then random bits) from the "bench-v7" topic, so
//     the inbox index grows at its right edge;
//   - inbox-ordered: per-record handler with time-ordered keys, to separate
//     the two effects;
//   - db-only-set-ordered: no broker at all. The same time-ordered records
//     (same ids, same payload) go straight into a fresh SQLite inbox with
//     inbox.ProcessBatchSet and the same set handler, in exactly the batch
//     sizes that the consumer handed to ProcessBatchSet in the same
//     iteration's set-ordered run (one batch per partition per poll). This is
//     the ceiling of any consumer of this shape on this machine: what the
//     store alone costs, with nothing fetched.
//
// Each iteration consumes benchRecords records from the start under a fresh
// group and a fresh SQLite database in each variant, so group join time is
// included in all of them.
//
//	go test -run '^$' -bench 'Consume$' -benchtime 3x ./adapters/idemkafka
func BenchmarkConsume(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench", "bench-v7"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	rs := make([]*kgo.Record, 0, 2*benchRecords)
	for i := range benchRecords {
		id, err := idem.DeriveKey("bench", strconv.Itoa(i)) // random-looking ids, as real message ids are
		if err != nil {
			b.Fatal(err)
		}
		r := &kgo.Record{Topic: "bench", Key: []byte(id), Value: []byte(`{"amount":50,"user":42}`)}
		idemkafka.SetID(r, id)
		rs = append(rs, r)
	}
	for range benchRecords {
		id := timeOrderedID() // what a producer stamping UUIDv7 ids sends
		r := &kgo.Record{Topic: "bench-v7", Key: []byte(id), Value: []byte(`{"amount":50,"user":42}`)}
		idemkafka.SetID(r, id)
		rs = append(rs, r)
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	group := 0
	nextGroup := func() string { group++; return fmt.Sprintf("bench-%d", group) }

	// The variants are interleaved in each iteration, so that the machine's
	// load (shared, ±30% run to run) hits them alike.
	ordered := rs[benchRecords:]
	var raw, batch, offs, setRandom, setOrdered, batchOrdered, dbOnly time.Duration
	var batches, batchRecs int
	for b.Loop() {
		t0 := time.Now()
		rawConsume(b, c, nextGroup())
		raw += time.Since(t0)
		batch += idemConsume(b, c, nextGroup(), "bench", modeInbox)
		offs += idemConsume(b, c, nextGroup(), "bench", modeOffsets)
		setRandom += idemConsume(b, c, nextGroup(), "bench", modeSet)
		var sizes []int
		setOrdered += idemConsume(b, c, nextGroup(), "bench-v7", modeSet, &sizes)
		batchOrdered += idemConsume(b, c, nextGroup(), "bench-v7", modeInbox)
		dbOnly += dbOnlySet(b, nextGroup(), ordered, sizes)
		batches += len(sizes)
		for _, n := range sizes {
			batchRecs += n
		}
	}
	rate := func(d time.Duration) float64 { return float64(benchRecords*b.N) / d.Seconds() }
	b.ReportMetric(rate(raw), "raw-records/s")
	b.ReportMetric(rate(batch), "inbox-records/s")
	b.ReportMetric(rate(offs), "offsets-records/s")
	b.ReportMetric(rate(setRandom), "set-random-records/s")
	b.ReportMetric(rate(setOrdered), "set-ordered-records/s")
	b.ReportMetric(rate(batchOrdered), "inbox-ordered-records/s")
	b.ReportMetric(rate(dbOnly), "db-only-set-ordered-records/s")
	b.ReportMetric(float64(batchRecs)/float64(batches), "set-ordered-records/batch")
	b.ReportMetric(rate(batch)/rate(raw), "inbox/raw")
	b.ReportMetric(rate(offs)/rate(raw), "offsets/raw")
	b.ReportMetric(rate(setRandom)/rate(raw), "set-random/raw")
	b.ReportMetric(rate(setOrdered)/rate(raw), "set-ordered/raw")
	b.ReportMetric(rate(batchOrdered)/rate(raw), "inbox-ordered/raw")
	b.ReportMetric(rate(dbOnly)/rate(raw), "db-only-set-ordered/raw")
	b.ReportMetric(rate(setOrdered)/rate(dbOnly), "set-ordered/db-only")
}

// dbOnlySet feeds recs, in order, straight into a fresh SQLite inbox with
// ProcessBatchSet and setInsert, in batches of the given sizes (those the
// consumer formed), building the inbox messages as the consumer does (key
// from the idem-id header, the record as the value). It returns the time
// from the first batch to the last commit; creating and migrating the
// database is outside it, as in idemConsume.
func dbOnlySet(b *testing.B, group string, recs []*kgo.Record, sizes []int) time.Duration {
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != len(recs) {
		b.Fatalf("db-only: batch sizes add up to %d records, want %d", total, len(recs))
	}
	db := testenv.SQLite(b)
	newEffects(b, db)
	in := newInbox(b, db, group)
	set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		rs := make([]*kgo.Record, len(fresh))
		for i, m := range fresh {
			rs[i] = m.Value.(*kgo.Record)
		}
		return setInsert(ctx, tx, rs)
	}
	ctx := context.Background()
	applied := 0
	t0 := time.Now()
	lo := 0
	for _, n := range sizes {
		msgs := make([]inbox.Message, 0, n)
		for _, r := range recs[lo : lo+n] {
			msgs = append(msgs, inbox.Message{Key: headerID(r), Value: r})
		}
		lo += n
		results, err := in.ProcessBatchSet(ctx, msgs, set, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, res := range results {
			if res.Applied {
				applied++
			}
		}
	}
	d := time.Since(t0)
	if applied != len(recs) {
		b.Fatalf("db-only: %d of %d records applied", applied, len(recs))
	}
	return d
}

// headerID returns the record's idem-id header, as the consumer's default
// key function reads it.
func headerID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == idemkafka.HeaderID {
			return string(h.Value)
		}
	}
	return ""
}

// timeOrderedID returns a version 7 UUID (RFC 9562: Unix milliseconds
// first) as canonical text: ids made later sort later.
func timeOrderedID() string { return uuid.Must(uuid.NewV7()).String() }

type consumeMode int

const (
	modeInbox   consumeMode = iota + 1 // NewConsumer, per-record handler
	modeOffsets                        // NewOffsetConsumer
	modeSet                            // NewConsumer with WithSetHandler (no fallback)
)

// setInsert is the set handler of the benchmark: the per-record handler's
// INSERT as one multi-row statement for the batch.
func setInsert(ctx context.Context, tx *sql.Tx, recs []*kgo.Record) error {
	return settest.Insert(ctx, tx, "INSERT INTO effects (id, consumer)", recs, func(r *kgo.Record) []any { return []any{string(r.Value), ""} })
}

// idemConsume consumes every record of topic under group with a Consumer in
// the given mode on a fresh SQLite database, and returns the time from Run to
// the last record's outcome. In modeSet, when sizes is not nil, the number of
// records of each batch given to the set handler is appended to it.
func idemConsume(b *testing.B, c *kfake.Cluster, group, topic string, mode consumeMode, sizes ...*[]int) time.Duration {
	db := testenv.SQLite(b)
	eff := newEffects(b, db)
	var done atomic.Int64
	all := make(chan struct{})
	opt := idemkafka.WithObserver(func(idemkafka.Event) {
		if done.Add(1) == benchRecords {
			close(all)
		}
	})
	var con interface {
		Run(context.Context) error
		Close()
	}
	var err error
	switch mode {
	case modeOffsets:
		var oc *idemkafka.OffsetConsumer
		oc, err = idemkafka.NewOffsetConsumer(db, sqldialect.SQLite, eff.handler(""), groupOpts(c, group, topic), opt)
		if err == nil {
			con, err = oc, oc.Migrate(context.Background())
		}
	case modeSet:
		set := setInsert
		if len(sizes) > 0 && sizes[0] != nil {
			// Read only after Run has returned (<-errc below).
			set = func(ctx context.Context, tx *sql.Tx, recs []*kgo.Record) error {
				*sizes[0] = append(*sizes[0], len(recs))
				return setInsert(ctx, tx, recs)
			}
		}
		con, err = idemkafka.NewConsumer(newInbox(b, db, group), nil, groupOpts(c, group, topic), opt, idemkafka.WithSetHandler(set))
	default:
		con, err = idemkafka.NewConsumer(newInbox(b, db, group), eff.handler(""), groupOpts(c, group, topic), opt)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer con.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() { errc <- con.Run(ctx) }()
	select {
	case <-all:
	case err := <-errc:
		b.Fatalf("Run: %v", err)
	case <-time.After(2 * time.Minute):
		b.Fatal("timed out")
	}
	d := time.Since(t0)
	cancel()
	<-errc
	return d
}

// rawConsume consumes every record of "bench" under group with franz-go
// alone: poll, mark, allow rebalance, as idemkafka does around its work.
func rawConsume(b *testing.B, c *kfake.Cluster, group string) {
	cl, err := kgo.NewClient(append(groupOpts(c, group, "bench"), kgo.BlockRebalanceOnPoll(), kgo.AutoCommitMarks())...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.CloseAllowingRebalance()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := 0
	for n < benchRecords {
		fs := cl.PollRecords(ctx, idemkafka.DefaultBatchSize)
		if ctx.Err() != nil {
			b.Fatal("timed out")
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				n += len(p.Records)
				cl.MarkCommitRecords(p.Records[len(p.Records)-1])
			}
		})
		cl.AllowRebalance()
	}
}

// BenchmarkOutboxRelay measures records/s from committed outbox rows into an
// in-process kfake broker (4 partitions, 100 keys), through an
// outbox.Relay on SQLite with OutboxPublisher, beside a plain franz-go
// ProduceSync loop and a loop of OutboxPublisher.Publish (no database) over
// the same messages in the same batches. b.N is the number of messages.
//
//	go test -run '^$' -bench OutboxRelay -benchtime 20000x ./adapters/idemkafka
func BenchmarkOutboxRelay(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	msg := func(i int) outbox.Message {
		return outbox.Message{ID: outbox.NewID(), Topic: "bench", OrderingKey: fmt.Sprint("acct-", i%100), Payload: []byte(`{"amount":50,"user":42}`), Seq: int64(i + 1), Headers: map[string]string{"type": "Deposited"}}
	}
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("plain-produce-loop/batch-%d", batch), func(b *testing.B) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			rs := make([]*kgo.Record, b.N)
			for i := range rs {
				rs[i] = idemkafka.OutboxRecord(msg(i))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				if err := cl.ProduceSync(ctx, rs[i:min(i+batch, b.N)]...).FirstErr(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
		b.Run(fmt.Sprintf("publisher-loop/batch-%d", batch), func(b *testing.B) {
			pub := outboxPublisher(b, c)
			msgs := make([]outbox.Message, b.N)
			for i := range msgs {
				msgs[i] = msg(i)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				if err := pub.Publish(ctx, msgs[i:min(i+batch, b.N)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
		b.Run(fmt.Sprintf("relay-sqlite/batch-%d", batch), func(b *testing.B) {
			pub := outboxPublisher(b, c)
			db := testenv.SQLite(b)
			o, err := outbox.New(sqldialect.SQLite)
			if err != nil {
				b.Fatal(err)
			}
			if err := o.Migrate(ctx, db); err != nil {
				b.Fatal(err)
			}
			// Committed before the clock starts: 100 messages per transaction.
			for i := 0; i < b.N; i += 100 {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				for j := i; j < min(i+100, b.N); j++ {
					if _, err := o.Add(ctx, tx, msg(j)); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			r, err := outbox.NewRelay(db, o, pub, outbox.WithBatch(batch))
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			sent := 0
			for sent < b.N {
				n, err := r.RunOnce(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.Fatalf("relay stopped after %d of %d messages", sent, b.N)
				}
				sent += n
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

func outboxPublisher(b *testing.B, c *kfake.Cluster) *idemkafka.OutboxPublisher {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	p, err := idemkafka.NewProducer(cl)
	if err != nil {
		b.Fatal(err)
	}
	return p.OutboxPublisher()
}
