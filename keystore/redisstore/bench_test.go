package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/keystore"
)

// BenchmarkRedis compares, on one client (one connection pool) and at the
// same concurrency (8×GOMAXPROCS goroutines, unpipelined):
//
//   - setnx: SET key 1 NX PX, the plain dedup write issued by go-redis;
//   - reserve: redisstore's Reserve script, one round trip like setnx;
//   - reserve+complete: the whole protocol for one key, two round trips.
func BenchmarkRedis(b *testing.B) {
	ctx := context.Background()
	rdb := client(b, func(o *redis.Options) { o.PoolSize = 32 })
	s := newStore(b, rdb)
	prefix := testenv.Name("b_") + ":"
	b.Cleanup(func() { cleanup(rdb, prefix, s) })
	run := func(b *testing.B, op func(key string) error) {
		var next atomic.Uint64
		b.SetParallelism(8)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op("key-" + strconv.FormatUint(next.Add(1), 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("setnx", func(b *testing.B) {
		run(b, func(key string) error {
			return rdb.SetNX(ctx, prefix+b.Name()+key, 1, time.Minute).Err()
		})
	})
	b.Run("reserve", func(b *testing.B) {
		run(b, func(key string) error {
			_, err := s.Reserve(ctx, b.Name()+key, nil, time.Minute)
			return err
		})
	})
	b.Run("reserve+complete", func(b *testing.B) {
		run(b, func(key string) error {
			c, err := s.Reserve(ctx, b.Name()+key, nil, time.Minute)
			if err != nil || c.State != keystore.Acquired {
				return err
			}
			return s.Complete(ctx, c, []byte("ok"), time.Minute)
		})
	})
}

// cleanup deletes the benchmark's keys from the shared test server.
func cleanup(rdb *redis.Client, prefix string, s interface{ RedisKey(string) string }) {
	ctx := context.Background()
	for _, pattern := range []string{prefix + "*", s.RedisKey("") + "*"} {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Unlink(ctx, iter.Val())
		}
	}
}
