package natsstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/internal/testsupport/natsenv"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/natsstore"
)

// BenchmarkNATS compares, on an R3 bucket of the 3-server test cluster and
// at c=1, 16 and 64 goroutines, each on a new key:
//
//   - kv-create: jetstream KeyValue.Create (put-if-absent), the bare
//     replicated write;
//   - reserve: Reserve (one fenced publish with a TTL);
//   - reserve+complete: the whole protocol for one key (a publish, a read
//     of the lease and a fenced publish).
func BenchmarkNATS(b *testing.B) {
	ctx := context.Background()
	_, js := natsenv.Shared(b).Connect(b)
	bucket := testenv.Name("bench_")
	s, err := natsstore.New(ctx, js, natsstore.WithBucket(bucket), natsstore.WithReplicas(3))
	if err != nil {
		b.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket + "_kv", Replicas: 3})
	if err != nil {
		b.Fatal(err)
	}
	var runs atomic.Uint64
	for _, c := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			for _, v := range []struct {
				name string
				op   func(key string) error
			}{
				{"kv-create", func(key string) error { _, err := kv.Create(ctx, key, []byte("1")); return err }},
				{"reserve", func(key string) error { _, err := testenv.ReserveNew(ctx, s, key); return err }},
				{"reserve+complete", func(key string) error { return testenv.ReserveComplete(ctx, s, key) }},
			} {
				b.Run(v.name, func(b *testing.B) {
					prefix := "r" + strconv.FormatUint(runs.Add(1), 10) + "-"
					testenv.Parallel(b, c, prefix, v.op)
				})
			}
		})
	}
}

// BenchmarkNATSBytesPerKey measures the stream bytes JetStream keeps per
// key (StreamInfo State.Bytes divided by the keys) on an R3 file-backed
// bucket of the 3-server test cluster, for n random UUIDv4 keys in the same
// run:
//
//   - kv-create: KeyValue.Create with a 1-byte value (the bare write);
//   - done-nil: a key Reserved then Completed with no result.
//
// Each replica stores that much again. n is IDEM_BYTES_KEYS (default
// 20000).
func BenchmarkNATSBytesPerKey(b *testing.B) {
	n := testenv.EnvInt(b, "IDEM_BYTES_KEYS", 20_000, 1)
	ctx := context.Background()
	_, js := natsenv.Shared(b).Connect(b)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uuid.NewString()
	}
	var runs atomic.Uint64
	for _, v := range []struct {
		name string
		open func(bucket string) (string, func(string) error)
	}{
		{"kv-create", func(bucket string) (string, func(string) error) {
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Replicas: 3})
			if err != nil {
				b.Fatal(err)
			}
			return "KV_" + bucket, func(k string) error { _, err := kv.Create(ctx, k, []byte("1")); return err }
		}},
		{"done-nil", func(bucket string) (string, func(string) error) {
			s, err := natsstore.New(ctx, js, natsstore.WithBucket(bucket), natsstore.WithReplicas(3))
			if err != nil {
				b.Fatal(err)
			}
			return "KV_" + bucket, func(k string) error {
				c, err := testenv.ReserveNew(ctx, s, k)
				if err != nil {
					return err
				}
				if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
					st, ierr := s.Inspect(ctx, k)
					return fmt.Errorf("%w (claim %+v; now %+v, %v)", err, c, st, ierr)
				}
				return nil
			}
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				bucket := testenv.Name("bytes_") + strconv.FormatUint(runs.Add(1), 10)
				stream, op := v.open(bucket)
				var next atomic.Int64
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
							if err := op(keys[i]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				st, err := js.Stream(ctx, stream)
				if err != nil {
					b.Fatal(err)
				}
				info, err := st.Info(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(info.State.Bytes)/float64(n), "B/key")
				b.ReportMetric(float64(info.State.Msgs), "msgs")
				_ = js.DeleteKeyValue(ctx, bucket)
			}
		})
	}
}
