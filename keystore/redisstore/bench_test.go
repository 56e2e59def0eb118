package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/redisstore"
)

// BenchmarkRedis compares, on one client (one connection pool of 64) and at
// the same number of goroutines (c=1, 4, 16, 64), each operation on a new key:
//
//   - setnx: SET key 1 NX PX, the plain dedup write issued by go-redis;
//   - reserve: redisstore's Reserve script as New configures it (at most
//     DefaultMaxInFlight round trips, the calls beyond share pipelines);
//   - setnx-batched: setnx sent through the same batching, the baseline
//     given the store's advantage;
//   - reserve-unbatched: Reserve with WithMaxInFlight(0), every call its
//     own round trip, like setnx;
//   - setnx-autopipeline, reserve-autopipeline: the same through the
//     client's go-redis AutoPipeliner;
//   - reserve+complete: the whole protocol for one key, two round trips.
//
// Every run writes keys of its own and deletes them when it ends, so a run
// never meets the keys of an earlier one nor pays for rehashing them. The
// numbers move by ±20% from run to run on a shared host: compare variants
// across several interleaved runs (docs/benchmarks.md shows how).
func BenchmarkRedis(b *testing.B) {
	ctx := context.Background()
	rdb := client(b, func(o *redis.Options) { o.PoolSize = 64 })
	ap, err := rdb.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	s, sap := newStore(b, rdb), newStore(b, ap)
	unbatched := newStore(b, rdb, redisstore.WithMaxInFlight(0))
	batched := redisstore.Batched(rdb, redisstore.DefaultMaxInFlight)
	prefix := testenv.Name("b_") + ":"
	b.Cleanup(func() { cleanup(rdb, prefix, s, sap, unbatched) })
	var runs atomic.Uint64
	for _, c := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			run := func(b *testing.B, op func(key string) error) {
				key := strconv.FormatUint(runs.Add(1), 10) + ":"
				testenv.Parallel(b, c, key, op)
				b.StopTimer()
				cleanup(rdb, prefix, s, sap, unbatched) // every run starts on an empty keyspace
			}
			for _, v := range []struct {
				name string
				op   func(key string) error
			}{
				{"setnx", func(key string) error { return rdb.SetNX(ctx, prefix+key, 1, time.Minute).Err() }},
				{"reserve", func(key string) error { _, err := testenv.ReserveNew(ctx, s, key); return err }},
				{"setnx-batched", func(key string) error {
					return batched(ctx, redis.NewBoolCmd(ctx, "set", prefix+key, 1, "px", 60000, "nx"))
				}},
				{"reserve-unbatched", func(key string) error { _, err := testenv.ReserveNew(ctx, unbatched, key); return err }},
				{"setnx-autopipeline", func(key string) error { return ap.SetNX(ctx, prefix+key, 1, time.Minute).Err() }},
				{"reserve-autopipeline", func(key string) error { _, err := testenv.ReserveNew(ctx, sap, key); return err }},
				{"reserve+complete", func(key string) error { return testenv.ReserveComplete(ctx, s, key) }},
			} {
				b.Run(v.name, func(b *testing.B) { run(b, v.op) })
			}
		})
	}
}

// cleanup deletes the benchmark's keys from the shared test server.
func cleanup(rdb redis.UniversalClient, prefix string, stores ...interface{ RedisKey(string) string }) {
	ctx := context.Background()
	if cc, ok := rdb.(*redis.ClusterClient); ok { // a SCAN sees one node's keys
		_ = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			cleanup(c, prefix, stores...)
			return nil
		})
		return
	}
	patterns := []string{prefix + "*"}
	for _, s := range stores {
		patterns = append(patterns, s.RedisKey("")+"*")
	}
	for _, pattern := range patterns {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Unlink(ctx, iter.Val())
		}
	}
}

// BenchmarkRedisCluster compares, on one ClusterClient of the 6-node test
// Cluster (redisstore.ClusterOptions, pools of 64 per node) and at c=1, 4,
// 16 and 64 goroutines, each on a new key:
//
//   - setnx: SET key 1 NX PX, keys spread over the slots;
//   - reserve: Reserve on a store with WithBuckets(64), as New batches;
//   - reserve-wait1: Reserve with WithWaitReplicas(1, 1s): the script and
//     a WAIT on one connection, unbatched (what replica acknowledgement
//     costs, not a like-for-like comparison).
func BenchmarkRedisCluster(b *testing.B) {
	ctx := context.Background()
	rdb := redis.NewClusterClient(redisstore.ClusterOptions(testenv.RedisClusterAddrs(b)))
	b.Cleanup(func() { rdb.Close() })
	prefix := testenv.Name("b_") + ":"
	s := newStore(b, rdb, redisstore.WithBuckets(64))
	w := newStore(b, rdb, redisstore.WithBuckets(64), redisstore.WithWaitReplicas(1, time.Second))
	var runs atomic.Uint64
	for _, c := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			for _, v := range []struct {
				name string
				op   func(key string) error
			}{
				{"setnx", func(key string) error { return rdb.SetNX(ctx, prefix+key, 1, time.Minute).Err() }},
				{"reserve", func(key string) error { _, err := testenv.ReserveNew(ctx, s, key); return err }},
				{"reserve-wait1", func(key string) error { _, err := testenv.ReserveNew(ctx, w, key); return err }},
			} {
				b.Run(v.name, func(b *testing.B) {
					key := strconv.FormatUint(runs.Add(1), 10) + ":"
					testenv.Parallel(b, c, key, v.op)
				})
			}
		})
	}
}
