package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/redisstore"
)

// TestCheckEviction: a server that may evict idem's keys is reported,
// naming the policy and the fix; noeviction, or no maxmemory, is not.
func TestCheckEviction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		bad  bool
	}{
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"}, true},
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lfu"}, true},
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}, false},
		{[]string{"--maxmemory-policy", "allkeys-lru"}, false}, // no maxmemory: nothing is evicted
	} {
		srv := testenv.StartRedis(t, tc.args...)
		s := newStore(t, serverClient(t, srv))
		err := s.CheckEviction(ctx)
		switch {
		case tc.bad && (!errors.Is(err, redisstore.ErrEvicting) || !strings.Contains(err.Error(), "noeviction") || !strings.Contains(err.Error(), tc.args[3])):
			t.Errorf("%v: %v, want ErrEvicting naming the policy and the fix", tc.args, err)
		case !tc.bad && err != nil:
			t.Errorf("%v: %v, want nil", tc.args, err)
		}
	}
}

// On a Cluster every master is checked, and the one that may evict is
// named.
func TestCheckEvictionCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	t.Cleanup(func() { cc.Close() })
	s := newStore(t, cc)
	if err := s.CheckEviction(ctx); err != nil {
		t.Fatalf("the test cluster (no maxmemory): %v", err)
	}
	// One master with a policy that evicts, and a maxmemory far above what
	// the tests use, so that nothing is evicted meanwhile.
	var (
		mu      sync.Mutex
		masters []string
	)
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, c.Options().Addr)
		return nil
	}); err != nil || len(masters) == 0 {
		t.Fatalf("masters %v: %v", masters, err)
	}
	victim := masters[0]
	vc := redis.NewClient(&redis.Options{Addr: victim})
	defer vc.Close()
	if err := vc.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: victim})
		defer c.Close()
		c.ConfigSet(ctx, "maxmemory", "0")
		c.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	})
	if err := vc.ConfigSet(ctx, "maxmemory", "8gb").Err(); err != nil {
		t.Fatal(err)
	}
	err := s.CheckEviction(ctx)
	if !errors.Is(err, redisstore.ErrEvicting) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "volatile-ttl") {
		t.Fatalf("one master may evict: %v, want ErrEvicting naming %s", err, victim)
	}
}
