package dynamostore_test

import (
	"context"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/dynamostore"
)

// Charging a card once per order, from Lambda functions or containers that
// SQS delivers to at least once: every worker makes one store on its
// client; the table is created on first start. It needs AWS credentials
// and a table, so it only compiles here.
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "idem_keys",
		dynamostore.WithScope("payments"),
		dynamostore.WithClockSkew(2*time.Second)) // the worst clock skew between workers you accept
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	charge := func(ctx context.Context, orderID string) ([]byte, error) {
		res, replayed, err := keystore.Do(ctx, store, "charge:"+orderID, nil, func(ctx context.Context) ([]byte, error) {
			// Call the payment API here with "charge:"+orderID as its
			// idempotency key, and return its charge id.
			return []byte("ch_123"), nil
		}, keystore.WithLease(30*time.Second), keystore.WithTTL(7*24*time.Hour))
		if replayed {
			log.Printf("order %s was charged before: %s", orderID, res)
		}
		return res, err
	}
	if _, err := charge(ctx, "order-42"); err != nil {
		log.Print(err) // not deleted from the queue: SQS redelivers and Do tries again
	}
}

// A store from the URL that `idem serve --store` takes.
func ExampleOpenURL() {
	ctx := context.Background()
	store, err := dynamostore.OpenURL(ctx, "dynamodb://idem_keys?region=us-east-1")
	if err != nil {
		log.Fatal(err)
	}
	_ = store
}
