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
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

const benchRecords = 20000

// BenchmarkConsume compares, in one run and against one kfake cluster, the
// raw consume rate of a franz-go group consumer (poll, mark, no database) with
// idemkafka's loop:
//
//   - inbox: a Consumer, ProcessBatch on SQLite with one INSERT per record as
//     the effect, random-looking keys (the "bench" topic);
//   - offsets: an OffsetConsumer (the effects and the offset in one
//     transaction, no key per record);
//   - set-random: a Consumer with WithSetHandler (ProcessBatchSet; the effect
//     is one multi-row INSERT per batch), random-looking keys;
//   - consumer (set-ordered): the same with time-ordered keys (UUIDv7 text)
//     from the "bench-v7" topic, so the inbox index grows at its right edge;
//   - inbox-ordered: per-record handler with time-ordered keys, to separate
//     the two effects;
//   - store-only: no broker at all (consumetest.StoreOnly). The same
//     time-ordered keys and payload go straight into a fresh SQLite inbox
//     with inbox.ProcessBatchSet and the same statement, in exactly the
//     batch sizes that the consumer handed to its set handler in the same
//     iteration (one batch per partition per poll). This is the ceiling of
//     any consumer of this shape on this machine: what the store alone
//     costs, with nothing fetched; consumer/store is the ratio to watch.
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
	var orderedIDs []string
	for i := range 2 * benchRecords {
		topic, id := "bench", ""
		if i < benchRecords {
			id, err = idem.DeriveKey("bench", strconv.Itoa(i)) // random-looking ids, as real message ids are
			if err != nil {
				b.Fatal(err)
			}
		} else {
			topic, id = "bench-v7", uuid.Must(uuid.NewV7()).String() // what a producer stamping UUIDv7 ids sends
			orderedIDs = append(orderedIDs, id)
		}
		r := &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(benchPayload)}
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
	var raw, batch, offs, setRandom, setOrdered, batchOrdered, storeOnly time.Duration
	batches := 0
	for b.Loop() {
		t0 := time.Now()
		rawConsume(b, c, nextGroup())
		raw += time.Since(t0)
		batch += idemConsume(b, c, nextGroup(), "bench", modeInbox, nil)
		offs += idemConsume(b, c, nextGroup(), "bench", modeOffsets, nil)
		setRandom += idemConsume(b, c, nextGroup(), "bench", modeSet, nil)
		var sizes consumetest.Sizes
		setOrdered += idemConsume(b, c, nextGroup(), "bench-v7", modeSet, &sizes)
		batchOrdered += idemConsume(b, c, nextGroup(), "bench-v7", modeInbox, nil)
		storeOnly += consumetest.StoreOnly(b, orderedIDs, benchPayload, sizes.All())
		batches += len(sizes.All())
	}
	rate := func(d time.Duration) float64 { return float64(benchRecords*b.N) / d.Seconds() }
	for _, m := range []struct {
		d    time.Duration
		name string
	}{{raw, "raw"}, {batch, "inbox"}, {offs, "offsets"}, {setRandom, "set-random"}, {batchOrdered, "inbox-ordered"}} {
		b.ReportMetric(rate(m.d), m.name+"-records/s")
		if m.d != raw {
			b.ReportMetric(rate(m.d)/rate(raw), m.name+"/raw")
		}
	}
	consumetest.Ceiling(b, benchRecords*b.N, setOrdered, storeOnly, batches)
}

// benchPayload is the value of every benchmark record.
const benchPayload = `{"amount":50,"user":42}`

// headerID returns the record's idem-id header, as the consumer's default
// key function reads it.
func headerID(r *kgo.Record) string { return header(r, idemkafka.HeaderID) }

type consumeMode int

const (
	modeInbox   consumeMode = iota + 1 // NewConsumer, per-record handler
	modeOffsets                        // NewOffsetConsumer
	modeSet                            // NewConsumer with WithSetHandler (no fallback)
)

// idemConsume consumes every record of topic under group with a consumer in
// the given mode on a fresh SQLite database (consumetest.NewEffects: each
// record's effect is a row (idem-id, value)), and returns the time from Run
// to the last record's outcome. In modeSet, sizes (if not nil) records the
// size of each batch given to the set handler.
func idemConsume(b *testing.B, c *kfake.Cluster, group, topic string, mode consumeMode, sizes *consumetest.Sizes) time.Duration {
	e := consumetest.NewEffects(b)
	var done atomic.Int64
	all := make(chan struct{})
	opt := idemkafka.WithObserver(func(idemkafka.Event) {
		if done.Add(1) == benchRecords {
			close(all)
		}
	})
	value := func(r *kgo.Record) string { return string(r.Value) }
	each := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		return e.Apply(ctx, tx, headerID(r), value(r))
	}
	var con runner
	var err error
	switch mode {
	case modeOffsets:
		var oc *idemkafka.OffsetConsumer
		oc, err = idemkafka.NewOffsetConsumer(e.DB, sqldialect.SQLite, each, groupOpts(c, group, topic), opt)
		if err == nil {
			con, err = oc, oc.Migrate(context.Background())
		}
	case modeSet:
		set := consumetest.SetInsert(headerID, value)
		if sizes != nil {
			set = consumetest.Record(sizes, set)
		}
		con, err = idemkafka.NewConsumer(e.In, nil, groupOpts(c, group, topic), opt, idemkafka.WithSetHandler(set))
	default:
		con, err = idemkafka.NewConsumer(e.In, each, groupOpts(c, group, topic), opt)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer con.Close()
	t0 := time.Now()
	r := consumetest.Start(con.Run)
	select {
	case <-all:
	case err := <-r.Done:
		b.Fatalf("Run: %v", err)
	case <-time.After(2 * time.Minute):
		b.Fatal("timed out")
	}
	d := time.Since(t0)
	_ = r.Stop(b)
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
			o := newOutbox(b, db)
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
	return newProducer(b, client(b, c)).OutboxPublisher()
}
