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
