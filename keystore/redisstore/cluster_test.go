package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/redisstore"
	"github.com/idem-go/idem/keystore/storetest"
)

// clusterClient returns a client of the shared test Cluster with the
// failover settings of redisstore.ClusterOptions, closed when t ends.
func clusterClient(t testing.TB) *redis.ClusterClient {
	rdb := redis.NewClusterClient(redisstore.ClusterOptions(testenv.RedisClusterAddrs(t)))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// On a 6-node Cluster, each scope spread over 64 buckets (hash tags), in
// the three ways a store sends its scripts, and waiting for one replica.
func TestClusterConformance(t *testing.T) {
	for _, v := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"defaults", nil},
		{"one-in-flight", []redisstore.Option{redisstore.WithMaxInFlight(1)}},
		{"unbatched", []redisstore.Option{redisstore.WithMaxInFlight(0)}},
		{"wait-replicas", []redisstore.Option{redisstore.WithWaitReplicas(1, time.Second)}},
	} {
		t.Run(v.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) keystore.Store {
				return newStore(t, clusterClient(t), append([]redisstore.Option{redisstore.WithBuckets(64)}, v.opts...)...)
			})
		})
	}
}

// One scope's keys land on every master with 64 buckets, and on one master
// with the single tag of earlier versions.
func TestClusterBucketsSpreadAScope(t *testing.T) {
	ctx := context.Background()
	rdb := clusterClient(t)
	for _, buckets := range []int{1, 64} {
		s := newStore(t, rdb, redisstore.WithBuckets(buckets))
		per := map[string]int{}
		const keys = 3000
		for i := range keys {
			node, err := rdb.MasterForKey(ctx, s.RedisKey(fmt.Sprint("order-", i)))
			if err != nil {
				t.Fatal(err)
			}
			per[node.Options().Addr]++
		}
		t.Logf("buckets=%d: keys per master %v", buckets, per)
		switch {
		case buckets == 1 && len(per) != 1:
			t.Errorf("one bucket: keys on %d masters, want 1", len(per))
		case buckets > 1 && len(per) != 3:
			t.Errorf("%d buckets: keys on %d masters, want all 3", buckets, len(per))
		case buckets > 1:
			for addr, n := range per {
				if n < keys/6 {
					t.Errorf("%d buckets: master %s holds %d of %d keys", buckets, addr, n, keys)
				}
			}
		}
	}
	// The key's record and its bucket's counter share a slot.
	s := newStore(t, rdb, redisstore.WithBuckets(64))
	a, _ := rdb.ClusterKeySlot(ctx, s.RedisKey("k")).Result()
	b, _ := rdb.ClusterKeySlot(ctx, s.CounterKey("k")).Result()
	if a != b {
		t.Fatalf("record in slot %d, counter in slot %d", a, b)
	}
}

func TestBucketOptions(t *testing.T) {
	rdb := client(t)
	for _, o := range []redisstore.Option{redisstore.WithBuckets(0), redisstore.WithBuckets(redisstore.MaxBuckets + 1),
		redisstore.WithWaitReplicas(-1, time.Second), redisstore.WithWaitReplicas(1, 0)} {
		if _, err := redisstore.New(rdb, o); err == nil {
			t.Errorf("New accepted a bad option")
		}
	}
	ap, _ := rdb.AutoPipeline()
	if _, err := redisstore.New(ap, redisstore.WithWaitReplicas(1, time.Second)); err == nil {
		t.Error("WithWaitReplicas on an AutoPipeliner accepted")
	}
	// Scopes with buckets never share a tag with a scope without: '{' is
	// not allowed in scope names.
	s := newStore(t, rdb, redisstore.WithBuckets(8))
	v, _ := s.Scope("a")
	if k := v.(*redisstore.Store).RedisKey("x"); !containsTag(k, "{a{") {
		t.Fatalf("bucketed key %q", k)
	}
}

func containsTag(k, tag string) bool {
	for i := 0; i+len(tag) <= len(k); i++ {
		if k[i:i+len(tag)] == tag {
			return true
		}
	}
	return false
}

// WAIT for a replica that does not exist: every write fails with
// ErrNotReplicated; a Reserve that could not be replicated is released
// (nobody was told Acquired, so nobody runs the effect), and a Complete
// that could not be is on the master all the same.
func TestWaitReplicasMissing(t *testing.T) {
	ctx := context.Background()
	rdb := client(t)
	direct := newStore(t, rdb)
	waiting, err := redisstore.New(rdb, redisstore.WithPrefix(prefixOf(direct)), redisstore.WithWaitReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = waiting.Reserve(ctx, "k", nil, time.Minute)
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Reserve with no replica: %v, want ErrNotReplicated", err)
	}
	c, err := direct.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("after an unreplicated Reserve: %+v %v, want the key free", c, err)
	}
	if err := waiting.Complete(ctx, c, []byte("r"), time.Minute); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Complete with no replica: %v, want ErrNotReplicated", err)
	}
	if d, _ := direct.Reserve(ctx, "k", nil, time.Minute); d.State != keystore.Done {
		t.Fatalf("after an unreplicated Complete: %+v, want done on the master", d)
	}
}

// With a replica, WAIT 1 succeeds and the replica has the write when the
// call returns.
func TestWaitReplicasAcknowledged(t *testing.T) {
	ctx := context.Background()
	master := testenv.StartRedis(t)
	replica := testenv.StartRedis(t, "--replicaof", "127.0.0.1", master.Addr[len("127.0.0.1:"):])
	rdb, rrep := serverClient(t, master), serverClient(t, replica)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, _ := rdb.Do(ctx, "wait", 1, 100).Int(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica did not connect")
		}
	}
	s, err := redisstore.New(rdb, redisstore.WithWaitReplicas(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		key := fmt.Sprint("k", i)
		c, err := s.Reserve(ctx, key, nil, time.Minute)
		if err != nil || c.State != keystore.Acquired {
			t.Fatalf("Reserve: %+v %v", c, err)
		}
		if err := s.Complete(ctx, c, []byte("r"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if n := rrep.Exists(ctx, s.RedisKey(key)).Val(); n != 1 {
			t.Fatalf("replica lacks %s right after Complete", key)
		}
	}
}

func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	addrs := testenv.RedisClusterAddrs(t)
	s, rdb, err := redisstore.OpenURL("redis-cluster://" + addrs[0] + "," + addrs[1] + "?prefix=" + testenv.Name("u") + ":&wait_replicas=1&wait_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("client %T, want a ClusterClient", rdb)
	}
	if k := s.RedisKey("k"); !containsTag(k, "{default{") {
		t.Fatalf("cluster URL key %q: want the default of %d buckets", k, redisstore.DefaultClusterBuckets)
	}
	if c, err := s.Reserve(ctx, "k", nil, time.Minute); err != nil || c.State != keystore.Acquired {
		t.Fatalf("Reserve: %+v %v", c, err)
	}
	s1, r1, err := redisstore.OpenURL("redis://" + testenv.RedisAddr(t) + "/0?dial_timeout=1s&buckets=4")
	if err != nil {
		t.Fatal(err)
	}
	r1.Close()
	if k := s1.RedisKey("k"); !containsTag(k, "{default{") {
		t.Fatalf("redis:// with buckets=4: key %q", k)
	}
	for _, bad := range []string{"memcache://x:1", "redis-cluster://", "redis-cluster://h", "redis-cluster://h:1?dial_timeout=1s",
		"redis-cluster://h:1?buckets=x", "redis-cluster://h:1?buckets=0", "redis://h:1?nope=1", "redis-cluster://h:1?prefix=a{"} {
		if _, c, err := redisstore.OpenURL(bad); !errors.Is(err, idem.ErrInvalidOption) {
			if c != nil {
				c.Close()
			}
			t.Errorf("OpenURL(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
}
