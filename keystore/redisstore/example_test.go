package redisstore_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/redisstore"
)

// Sending a welcome email once per sign-up, from as many workers as the
// queue has: each worker process makes one store on its client and shares
// it between goroutines, so that their calls share round trips under load.
// It needs a Redis server, so it only compiles here.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithScope("emails"))
	if err != nil {
		log.Fatal(err)
	}
	send := func(ctx context.Context, userID string) error {
		_, _, err := keystore.Do(ctx, store, "welcome:"+userID, nil, func(ctx context.Context) ([]byte, error) {
			// Call the mail API here, passing "welcome:"+userID as its
			// idempotency key if it takes one.
			return nil, nil
		}, keystore.WithLease(time.Minute), keystore.WithTTL(7*24*time.Hour))
		return err
	}
	if err := send(ctx, "user-42"); err != nil {
		log.Print(err) // not acknowledged: the queue redelivers and Do tries again
	}
}

// A store on a Redis Cluster that survives the loss of a master: the
// client reloads the slot map every second (a failover costs seconds, not
// a minute), each scope spreads over 64 hash tags (every master serves
// it), and every write waits for one replica (a failover loses no
// acknowledged write). It needs a Redis Cluster, so it only compiles here.
func ExampleClusterOptions() {
	rdb := redis.NewClusterClient(redisstore.ClusterOptions([]string{"redis-1:6379", "redis-2:6379", "redis-3:6379"}))
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithBuckets(64), redisstore.WithWaitReplicas(1, 500*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	_, _, err = keystore.Do(context.Background(), store, "refund:order-42", nil, func(ctx context.Context) ([]byte, error) {
		return nil, nil // the effect; an ErrNotReplicated from Complete means: do not acknowledge, retry
	}, keystore.WithLease(30*time.Second), keystore.WithTTL(24*time.Hour))
	if err != nil {
		log.Print(err)
	}
}

// The same store from a URL, as `idem serve --store` takes it.
func ExampleOpenURL() {
	store, rdb, err := redisstore.OpenURL("redis-cluster://redis-1:6379,redis-2:6379?wait_replicas=1&wait_timeout=500ms")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	_ = store
}
