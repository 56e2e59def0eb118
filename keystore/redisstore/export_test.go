package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Batched returns a function that sends commands on rdb the way a store
// does with WithMaxInFlight(slots), for benchmarks that batch a baseline
// the same way.
func Batched(rdb redis.UniversalClient, slots int) func(context.Context, redis.Cmder) error {
	return (&batcher{rdb: rdb, slots: slots}).process
}

// Subscriptions returns the number of subscription connections s holds.
func Subscriptions(s *Store) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return len(s.hub.groups)
}
