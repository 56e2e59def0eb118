package dynamostore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/dynamostore"
)

// BenchmarkDynamo compares, on one client and one table, at c = 1, 16 and
// 64 goroutines, each operation on a new random UUIDv4 key:
//
//   - putitem: a bare conditional PutItem (attribute_not_exists), the plain
//     dedup write, one round trip;
//   - updateitem: the UpdateItem request Reserve sends, sent bare (what the
//     server costs for Reserve's expressions, without the store's code);
//   - reserve: the store's Reserve, that one conditional UpdateItem;
//   - put+update: a conditional PutItem and then a conditional UpdateItem,
//     the two writes any reserve-then-complete protocol needs (what
//     Powertools Idempotency sends), the baseline of
//   - reserve+complete: the store's whole protocol for one key.
//
// Every variant runs on a table of its own, so that none pays for the keys
// of another. dynalite's latencies are not DynamoDB's (it runs on the same
// host, in one Node.js process, and is the bottleneck under concurrency):
// the ratios say what the store adds on the client and what its
// expressions cost a server, not what a region costs.
func BenchmarkDynamo(b *testing.B) {
	ctx := context.Background()
	api, _ := client(b, "")
	var s *dynamostore.Store
	var table *string
	put := func(key string) error {
		_, err := api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: table,
			Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "p" + key},
				"ex": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(time.Minute).UnixMilli())},
			},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		return err
	}
	update := func(key string) error {
		_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 table,
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "p" + key}},
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			UpdateExpression:          aws.String("SET st = :d, ex = :e"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":d": &types.AttributeValueMemberN{Value: "2"}, ":e": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())}},
		})
		return err
	}
	for _, c := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			for _, v := range []struct {
				name string
				op   func(key string) error
			}{
				{"putitem", put},
				{"updateitem", func(key string) error { _, err := api.UpdateItem(ctx, s.ReserveInput(key)); return err }},
				{"reserve", func(key string) error { _, err := testenv.ReserveNew(ctx, s, key); return err }},
				{"put+update", func(key string) error {
					if err := put(key); err != nil {
						return err
					}
					return update(key)
				}},
				{"reserve+complete", func(key string) error { return testenv.ReserveComplete(ctx, s, key) }},
			} {
				s = newStore(b, api)
				table = aws.String(s.Table())
				b.Run(v.name, func(b *testing.B) {
					testenv.Parallel(b, c, "", func(string) error { return v.op(uuid.NewString()) })
				})
			}
		})
	}
}
