package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrEvicting is wrapped by CheckEviction's error when a server may evict
// idem's keys under memory pressure.
var ErrEvicting = errors.New("redisstore: the server may evict idem's keys")

// CheckEviction reports whether the server (on a Cluster, every master)
// may drop idem's keys when it runs out of memory: it reads maxmemory and
// maxmemory-policy from INFO memory (which works where CONFIG is disabled,
// as on managed Redis). Every key idem writes has an expiry (a lease or a
// TTL), so every eviction policy but noeviction can drop one: a done key
// evicted turns its retry into a second run of the effect, a lease evicted
// lets a duplicate run beside the first. With maxmemory 0 nothing is
// evicted. The error wraps ErrEvicting and names the server, the policy
// and the fix; call it at start-up and log it (idem serve does). Other
// errors are the server's.
func (s *Store) CheckEviction(ctx context.Context) error {
	rdb := s.conn.rdb
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var (
			mu   sync.Mutex
			errs []error
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			err := checkEviction(ctx, c, c.Options().Addr)
			if errors.Is(err, ErrEvicting) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return nil
			}
			return err
		})
		return errors.Join(append(errs, err)...)
	}
	return checkEviction(ctx, rdb, "")
}

func checkEviction(ctx context.Context, c redis.Cmdable, addr string) error {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return fmt.Errorf("redisstore: INFO memory: %w", err)
	}
	maxmemory, policy := "", ""
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		switch k {
		case "maxmemory":
			maxmemory = v
		case "maxmemory_policy":
			policy = v
		}
	}
	if policy == "" || policy == "noeviction" || maxmemory == "0" {
		return nil
	}
	where := "the Redis server"
	if addr != "" {
		where = "Redis master " + addr
	}
	return fmt.Errorf("%s has maxmemory %s bytes and maxmemory-policy %s: when it fills, it may evict idem's keys (every one has an expiry), and a retry of an evicted key runs its effect again; set maxmemory-policy noeviction (writes then fail, and idem fails closed) or give idem a Redis of its own: %w", where, maxmemory, policy, ErrEvicting)
}
