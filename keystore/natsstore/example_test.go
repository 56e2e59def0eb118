package natsstore_test

import (
	"context"
	"log"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/natsstore"
)

// Charging a card once per order from workers on several machines, with
// the keys in a bucket replicated over a 3-server NATS cluster: the loss of
// any one server (its leader included) loses no completed key. It needs a
// NATS cluster, so it only compiles here.
func Example() {
	ctx := context.Background()
	store, nc, err := natsstore.OpenURL(ctx, "nats://nats-1:4222,nats-2:4222,nats-3:4222?bucket=payments&replicas=3")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	charge := func(ctx context.Context, orderID string) error {
		_, _, err := keystore.Do(ctx, store, "charge:"+orderID, nil, func(ctx context.Context) ([]byte, error) {
			// Call the payment API here, with keystore.ClaimFrom(ctx).Token
			// as a fencing token and "charge:"+orderID as its idempotency key.
			return []byte("ch_123"), nil
		}, keystore.WithLease(30*time.Second), keystore.WithTTL(72*time.Hour))
		return err
	}
	if err := charge(ctx, "order-42"); err != nil {
		log.Print(err) // not acknowledged: the queue redelivers and Do tries again
	}
}
