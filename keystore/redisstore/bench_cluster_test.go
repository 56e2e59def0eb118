package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/keystore/redisstore"
)

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
