package dynamostore

import "github.com/aws/aws-sdk-go-v2/service/dynamodb"

// ReserveInput returns the UpdateItem request Reserve sends for a new key,
// for benchmarks that send it without the store around it.
func (s *Store) ReserveInput(key string) *dynamodb.UpdateItemInput {
	return s.reserveInput(key, nil, make([]byte, 12), 60e9).in
}
