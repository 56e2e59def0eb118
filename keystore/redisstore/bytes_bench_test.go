package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// BenchmarkRedisBytesPerKey measures Redis's memory per key (used_memory
// after minus before, divided by the keys written) for n random UUIDv4
// keys, in the same run:
//
//   - setnx: SET key 1 NX PX, the bare dedup write (the anchor);
//   - done-nil: a key Reserved then Completed with no result (what a
//     consumer's seen-set or keystore.Do with a nil result keeps);
//   - done-16B: the same with a 16-byte result.
//
// n is IDEM_BYTES_KEYS (default 200000). Each variant's keys are deleted
// before the next one starts. `idem plan` prints the done-nil figure.
func BenchmarkRedisBytesPerKey(b *testing.B) {
	n := testenv.EnvInt(b, "IDEM_BYTES_KEYS", 200_000, 1)
	ctx := context.Background()
	rdb := client(b, func(o *redis.Options) { o.PoolSize = 64 })
	s := newStore(b, rdb)
	prefix := testenv.Name("bk_") + ":"
	b.Cleanup(func() { cleanup(rdb, prefix, s) })
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uuid.NewString()
	}
	complete := func(result []byte) func(string) error {
		return func(k string) error {
			c, err := testenv.ReserveNew(ctx, s, k)
			if err != nil {
				return err
			}
			return s.Complete(ctx, c, result, time.Hour)
		}
	}
	for _, v := range []struct {
		name string
		op   func(key string) error
	}{
		{"setnx", func(k string) error { return rdb.SetNX(ctx, prefix+k, 1, time.Hour).Err() }},
		{"done-nil", complete(nil)},
		{"done-16B", complete([]byte("0123456789abcdef"))},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				cleanup(rdb, prefix, s)
				before := usedMemory(b, rdb)
				writeAll(b, keys, v.op)
				after := usedMemory(b, rdb)
				b.ReportMetric(float64(after-before)/float64(n), "B/key")
				b.ReportMetric(float64(n), "keys")
			}
		})
	}
}

// writeAll runs op on every key from 64 goroutines.
func writeAll(b *testing.B, keys []string, op func(string) error) {
	var wg sync.WaitGroup
	const c = 64
	for g := range c {
		wg.Go(func() {
			for i := g; i < len(keys); i += c {
				if err := op(keys[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// usedMemory is Redis's used_memory, in bytes.
func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}
