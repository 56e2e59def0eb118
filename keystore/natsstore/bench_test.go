package natsstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/internal/natsenv"
	"github.com/idem-go/idem/internal/testenv"
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
