package idemkafka_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem/adapters/idemkafka"
)

// BenchmarkTransact compares, in one run and against one kfake cluster,
// three ways of moving benchRecords records from one topic to another:
//
//   - produce: no consumer at all, the records produced once (the
//     broker's and client's ceiling for the output side);
//   - plain: a group consumer that produces one record per input, flushes
//     and commits the poll's offsets (at least once: duplicates after a
//     crash, see TestTransactCrash);
//   - transact: the TransactConsumer, one Kafka transaction per poll of up
//     to DefaultBatchSize records (exactly once for read_committed readers).
//
// Each iteration consumes from the start under fresh groups, so group join
// time is included in both consuming variants.
//
//	go test -run '^$' -bench Transact -benchtime 3x ./adapters/idemkafka/
func BenchmarkTransact(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "tx-in", "tx-out"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rs := make([]*kgo.Record, benchRecords)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: "tx-in", Key: fmt.Appendf(nil, "acct-%d", i%1000), Value: []byte(`{"amount":50,"user":42}`)}
	}
	produceAll(b, c, rs)
	ledger := func(r *kgo.Record) *kgo.Record {
		return &kgo.Record{Topic: "tx-out", Key: r.Key, Value: r.Value}
	}
	group := 0
	opts := func() []kgo.Opt {
		group++
		return []kgo.Opt{
			kgo.SeedBrokers(c.ListenAddrs()...),
			kgo.ConsumerGroup(fmt.Sprintf("tx-bench-%d", group)),
			kgo.ConsumeTopics("tx-in"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(100 * time.Millisecond),
		}
	}
	var produce, plain, transact time.Duration
	for b.Loop() {
		t0 := time.Now()
		outs := make([]*kgo.Record, len(rs))
		for i, r := range rs {
			outs[i] = ledger(r)
		}
		produceAll(b, c, outs)
		produce += time.Since(t0)

		t0 = time.Now()
		plainLoop(b, opts(), ledger)
		plain += time.Since(t0)

		t0 = time.Now()
		transactLoop(b, opts(), ledger)
		transact += time.Since(t0)
	}
	rate := func(d time.Duration) float64 { return float64(benchRecords*b.N) / d.Seconds() }
	b.ReportMetric(rate(produce), "produce-records/s")
	b.ReportMetric(rate(plain), "plain-records/s")
	b.ReportMetric(rate(transact), "transact-records/s")
	b.ReportMetric(rate(transact)/rate(plain), "transact/plain")
}

func produceAll(b *testing.B, c *kfake.Cluster, rs []*kgo.Record) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
}

// plainLoop consumes benchRecords records, producing one output each; per
// poll it flushes the outputs and then commits the offsets.
func plainLoop(b *testing.B, kopts []kgo.Opt, f func(*kgo.Record) *kgo.Record) {
	b.Helper()
	cl, err := kgo.NewClient(append(kopts, kgo.DisableAutoCommit())...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	var failed atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Store(err)
		}
	}
	for n := 0; n < benchRecords; {
		fs := cl.PollRecords(ctx, idemkafka.DefaultBatchSize)
		fs.EachRecord(func(r *kgo.Record) { cl.Produce(ctx, f(r), promise); n++ })
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// transactLoop runs a TransactConsumer until benchRecords records committed.
func transactLoop(b *testing.B, kopts []kgo.Opt, f func(*kgo.Record) *kgo.Record) {
	b.Helper()
	var n atomic.Int64
	done := make(chan struct{})
	c, err := idemkafka.NewTransactional("bench-0", func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		return []*kgo.Record{f(r)}, nil
	}, kopts, idemkafka.WithObserver(func(idemkafka.Event) {
		if n.Add(1) == benchRecords {
			close(done)
		}
	}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	select {
	case <-done:
	case err := <-errc:
		b.Fatal(err)
	}
	cancel()
	<-errc
	c.Close()
}
