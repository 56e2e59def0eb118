// Mirror of the DynamoDB block of docs/keystore.md.
//
//docsnippets:build-only needs DynamoDB (or DynamoDB Local)
package main

import (
	"context"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem/keystore/dynamostore"
)

func open(ctx context.Context, cfg aws.Config) (*dynamostore.Store, error) {
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "idem_keys",
		dynamostore.WithScope("payments"), dynamostore.WithClockSkew(2*time.Second))
	if err != nil {
		return nil, err
	}
	// or: dynamostore.OpenURL(ctx, "dynamodb://idem_keys?region=eu-west-1&endpoint=http://localhost:8000")
	if err := store.Migrate(ctx); err != nil { // creates the table (PAY_PER_REQUEST) if missing, waits, enables TTL
		return nil, err
	}
	return store, nil
}

func main() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := open(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}
