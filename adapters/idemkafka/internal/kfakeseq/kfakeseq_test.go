package kfakeseq_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idem-go/idem/sequence"
)

// wireBatch is a produce batch as the broker received it.
type wireBatch struct {
	batch  sequence.Batch
	values []string
}

// decodeProduce extracts the idempotent batches of a produce request. The
// producer is configured without compression so record values can be read.
func decodeProduce(req *kmsg.ProduceRequest) ([]wireBatch, error) {
	var out []wireBatch
	for _, tp := range req.Topics {
		for _, p := range tp.Partitions {
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(p.Records); err != nil {
				return nil, err
			}
			last := int32((int64(rb.FirstSequence) + int64(rb.LastOffsetDelta)) % (1 << 31))
			wb := wireBatch{batch: sequence.Batch{
				ProducerID: rb.ProducerID,
				Epoch:      rb.ProducerEpoch,
				Partition:  p.Partition,
				FirstSeq:   rb.FirstSequence,
				LastSeq:    last,
				Timestamp:  time.UnixMilli(rb.MaxTimestamp),
			}}
			raw := rb.Records
			for range rb.NumRecords {
				n, w := binary.Varint(raw)
				if w <= 0 || int(n)+w > len(raw) {
					return nil, fmt.Errorf("bad record length in batch")
				}
				var r kmsg.Record
				if err := r.ReadFrom(raw[:w+int(n)]); err != nil {
					return nil, err
				}
				wb.values = append(wb.values, string(r.Value))
				raw = raw[w+int(n):]
			}
			out = append(out, wb)
		}
	}
	return out, nil
}

// TestTrackerAgreesWithKfake produces with franz-go's idempotent producer to
// kfake (franz-go's in-process Kafka) while kfake appends some produce
// requests and then answers them REQUEST_TIMED_OUT, as a broker whose
// acknowledgement is lost. The client retries those batches with the same
// sequences. Every batch kfake received is captured off the wire and fed,
// in arrival order, to a Tracker: the Tracker must flag exactly the retries
// as duplicates with the original offsets, and agree with the partition as
// read back (each record once, at the offset the Tracker assigned).
//
// Only sequences far from the int32 wrap are used: kfake's own wrap handling
// is not Kafka's, and the Tracker's wrap rules are covered against Kafka's
// rules in TestTrackerKafkaRules.
func TestTrackerAgreesWithKfake(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	var (
		mu        sync.Mutex
		received  []wireBatch
		decodeErr error
	)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		bs, err := decodeProduce(req.(*kmsg.ProduceRequest))
		mu.Lock()
		received = append(received, bs...)
		if err != nil {
			decodeErr = err
		}
		mu.Unlock()
		return nil, nil, false // observe only: kfake handles the request
	})

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	produced := map[string]int32{} // value -> partition
	produceSync := func(part int32, vals ...string) {
		t.Helper()
		var wg sync.WaitGroup
		for _, v := range vals {
			produced[v] = part
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Partition: part, Value: []byte(v)}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("produce %s: %v", v, err)
				}
			})
		}
		wg.Wait()
	}
	// lostAck makes kfake append the next produce request and answer it
	// with REQUEST_TIMED_OUT, as if the acknowledgement were lost.
	var faults []*kfake.FaultHandle
	lostAck := func() {
		faults = append(faults, c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut}))
	}

	produceSync(0, "a0")
	produceSync(0, "a1")
	lostAck()
	produceSync(0, "a2") // single-record batch: appended, ack lost, retried
	produceSync(1, "b0", "b1")
	lostAck()
	produceSync(1, "b2", "b3", "b4") // multi-record batch: appended, ack lost, retried
	produceSync(0, "a3", "a4")
	lostAck()
	produceSync(0, "a5")
	produceSync(0, "a6")

	hits := 0
	for _, h := range faults {
		hits += h.Hits()
	}
	if hits != len(faults) {
		t.Fatalf("faults answered %d requests, want %d", hits, len(faults))
	}

	// What the partitions hold, read back.
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Close)
	type pos struct {
		part   int32
		offset int64
	}
	inLog := map[string][]pos{}
	for n := 0; n < len(produced); {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("fetch: %v (read %d of %d records)", err, n, len(produced))
		}
		fs.EachRecord(func(r *kgo.Record) {
			inLog[string(r.Value)] = append(inLog[string(r.Value)], pos{r.Partition, r.Offset})
			n++
		})
	}
	for v, part := range produced {
		if got := inLog[v]; len(got) != 1 || got[0].part != part {
			t.Fatalf("record %s is in the log at %v; want once, in partition %d", v, got, part)
		}
	}

	// Replay what the broker received through a Tracker.
	mu.Lock()
	defer mu.Unlock()
	if decodeErr != nil {
		t.Fatal(decodeErr)
	}
	tr, err := sequence.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	dups := 0
	for i, wb := range received {
		v, err := tr.Check(wb.batch, time.Now())
		if err != nil {
			t.Fatalf("batch %d %+v: tracker rejected what kfake accepted: %v", i, wb.batch, err)
		}
		if v.Duplicate {
			dups++
		}
		// Whether appended or a duplicate, the verdict's offset is where
		// the batch's records are in the log.
		for j, val := range wb.values {
			if want := (pos{wb.batch.Partition, v.Offset + int64(j)}); inLog[val][0] != want {
				t.Fatalf("batch %d record %s: tracker says %+v (duplicate %v), log says %+v", i, val, want, v.Duplicate, inLog[val][0])
			}
		}
	}
	if dups != len(faults) {
		t.Fatalf("tracker flagged %d duplicates among %d received batches; want one per lost ack (%d)", dups, len(received), len(faults))
	}
	for part := int32(0); part < 2; part++ {
		if hwm, leo := c.PartitionInfo(topic, part).HighWatermark, tr.LogEndOffset(part); hwm != leo {
			t.Fatalf("partition %d: kfake high watermark %d, tracker log end offset %d", part, hwm, leo)
		}
	}
	t.Logf("%d batches received by the broker, %d duplicates flagged, %d records in the log", len(received), dups, len(produced))
}
