package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// MigrateTimeout bounds how long Migrate waits for a new table to become
// ACTIVE.
const MigrateTimeout = 5 * time.Minute

// ErrTableMismatch is returned by Migrate when the table exists with
// another key schema, or with TTL on another attribute.
var ErrTableMismatch = errors.New("dynamostore: table does not match the store")

// Migrate creates the store's table if it does not exist (on-demand
// capacity, PAY_PER_REQUEST; a string partition key, no sort key), waits
// until it is ACTIVE, and enables DynamoDB's TTL on the TTL attribute. It is
// safe to run from many processes at once and on every start. A table that
// exists with another key schema is ErrTableMismatch, and so is one whose
// TTL is on another attribute.
//
// TTL only saves storage: DynamoDB deletes expired items lazily (typically
// within days), and the store decides expiry from the items' own attributes,
// never from an item being gone. A server that does not implement
// UpdateTimeToLive (dynalite) therefore gets no TTL and no error.
//
// Crash or cancel: a table being created goes on being created; running
// Migrate again waits for it.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &s.table,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: &s.attrs.Key, AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: &s.attrs.Key, KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: migrate: create table %s: %w", s.table, err)
	}
	w := dynamodb.NewTableExistsWaiter(s.api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 5*time.Second
	})
	desc, err := w.WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: &s.table}, MigrateTimeout)
	if err != nil {
		return fmt.Errorf("dynamostore: migrate: wait for table %s: %w", s.table, err)
	}
	if ks := desc.Table.KeySchema; len(ks) != 1 || aws.ToString(ks[0].AttributeName) != s.attrs.Key || ks[0].KeyType != types.KeyTypeHash {
		return fmt.Errorf("%w: table %s has key schema %s, want a partition key %q and no sort key", ErrTableMismatch, s.table, schemaString(ks), s.attrs.Key)
	}
	return s.enableTTL(ctx)
}

func (s *Store) enableTTL(ctx context.Context) error {
	d, err := s.api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &s.table})
	if unsupported(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dynamostore: migrate: describe TTL of %s: %w", s.table, err)
	}
	if t := d.TimeToLiveDescription; t != nil && t.AttributeName != nil {
		switch t.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if *t.AttributeName != s.attrs.TTL {
				return fmt.Errorf("%w: table %s has TTL on %q, the store writes %q", ErrTableMismatch, s.table, *t.AttributeName, s.attrs.TTL)
			}
			return nil
		}
	}
	_, err = s.api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &s.table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: &s.attrs.TTL, Enabled: aws.Bool(true)},
	})
	if err != nil && !unsupported(err) {
		return fmt.Errorf("dynamostore: migrate: enable TTL on %s.%s: %w", s.table, s.attrs.TTL, err)
	}
	return nil
}

// unsupported reports whether err says the server does not implement the
// operation.
func unsupported(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "UnknownOperationException"
}

func schemaString(ks []types.KeySchemaElement) string {
	s := ""
	for _, k := range ks {
		s += fmt.Sprintf("[%s %s]", aws.ToString(k.AttributeName), k.KeyType)
	}
	return s
}
