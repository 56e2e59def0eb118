package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/dynamostore"
)

// TestLostAnswer: the write lands but its answer is lost (the proxy answers
// 500 after forwarding it), and the SDK's retryer sends it again. Reserve
// recognises its own lease by its nonce and answers Acquired (not "in
// progress" under a lease nobody holds); Complete and Release find the key
// done or released under their own token and return nil.
func TestLostAnswer(t *testing.T) {
	p := newProxy(t)
	api, _ := client(t, p.srv.URL)
	s := newStore(t, api)
	ctx := context.Background()
	for _, oldItem := range []bool{false, true} {
		p.oldItem.Store(oldItem)
		key := uuid.NewString()
		p.drop.Store(1)
		c, err := s.Reserve(ctx, key, []byte("fp"), time.Minute)
		if err != nil || c.State != keystore.Acquired {
			t.Fatalf("Reserve with a lost answer (item returned: %v): %+v %v; want acquired", oldItem, c, err)
		}
		if r, err := s.Reserve(ctx, key, []byte("fp"), time.Minute); err != nil || r.State != keystore.InProgress {
			t.Fatalf("second Reserve: %+v %v", r, err)
		}
		p.drop.Store(1)
		if err := s.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
			t.Fatalf("Complete with a lost answer: %v", err)
		}
		if r, _ := s.Reserve(ctx, key, nil, time.Minute); r.State != keystore.Done || string(r.Result) != "r" {
			t.Fatalf("after Complete: %+v", r)
		}
		c2, _ := s.Reserve(ctx, key+"-2", nil, time.Minute)
		p.drop.Store(1)
		if err := s.Release(ctx, c2); err != nil {
			t.Fatalf("Release with a lost answer: %v", err)
		}
		if r, _ := s.Reserve(ctx, key+"-2", nil, time.Minute); r.State != keystore.Acquired || r.Token <= c2.Token {
			t.Fatalf("after Release: %+v", r)
		}
	}
}

// TestResultAtLimit: the largest result the store accepts fits in a
// DynamoDB item even with the longest scope and key and the longest
// fingerprint (dynalite enforces the 400 KB item limit with DynamoDB's size
// rules); one byte more is ErrResultTooLarge before any request.
func TestResultAtLimit(t *testing.T) {
	api, cnt := client(t, "")
	s := newStore(t, api)
	sc, err := s.Scope(strings.Repeat("s", keystore.MaxScopeLen))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := strings.Repeat("é", idem.MaxKeyLen/2) + "k"
	fp := bytes.Repeat([]byte{0xff}, idem.MaxFingerprintLen)
	c, err := sc.Reserve(ctx, key, fp, keystore.MaxDuration)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{7}, s.MaxResultSize())
	cnt.take()
	if err := sc.Complete(ctx, c, append(big, 0), keystore.MaxDuration); !errors.Is(err, keystore.ErrResultTooLarge) {
		t.Fatalf("Complete one byte over: %v, want ErrResultTooLarge", err)
	}
	if n := cnt.take(); len(n) != 0 {
		t.Fatalf("Complete of a result over the limit sent %v", n)
	}
	if err := sc.Complete(ctx, c, big, keystore.MaxDuration); err != nil {
		t.Fatalf("Complete at the limit (%d bytes): %v", len(big), err)
	}
	if r, err := sc.Reserve(ctx, key, fp, time.Minute); err != nil || !bytes.Equal(r.Result, big) {
		t.Fatalf("result at the limit came back as %d bytes (%v)", len(r.Result), err)
	}
	if lim := s.MaxResultSize(); lim < 400*1024-1024 || lim > dynamostore.ItemLimit {
		t.Fatalf("MaxResultSize %d: want within 1 KB under the item limit", lim)
	}
}

// TestItemSize: ItemSize matches the size of the item the store writes for a
// done key with an empty result, counted attribute by attribute with
// DynamoDB's rules, and that is one write unit.
func TestItemSize(t *testing.T) {
	api, _ := client(t, "")
	s := newStore(t, api)
	ctx := context.Background()
	key := uuid.NewString()
	c, _ := s.Reserve(ctx, key, nil, time.Minute)
	if err := s.Complete(ctx, c, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	it := rawItem(t, api, s, key)
	size := 0
	for name, v := range it {
		size += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			size += len(v.Value)
		case *types.AttributeValueMemberB:
			size += len(v.Value)
		case *types.AttributeValueMemberN:
			digits := strings.TrimRight(strings.TrimLeft(v.Value, "0"), "0")
			size += (len(digits)+1)/2 + 1
		default:
			t.Fatalf("attribute %s is %T", name, v)
		}
	}
	want := dynamostore.ItemSize(dynamostore.DefaultAttributes, keystore.DefaultScope, key, 0, 0, time.Now())
	if size > want || size < want-4 || want != 82 || dynamostore.WriteUnits(want) != 1 {
		t.Fatalf("done item %v is %d bytes, ItemSize says %d (documented: 82 at most, one write unit; numbers ending in zeros count less)", it, size, want)
	}
}

// TestMigrate: Migrate creates an on-demand table and waits until it is
// ACTIVE, is idempotent, and refuses a table with another key schema.
func TestMigrate(t *testing.T) {
	api, _ := client(t, "")
	s := newStore(t, api)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	desc, err := api.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(s.Table())})
	if err != nil || desc.Table.TableStatus != types.TableStatusActive || desc.Table.BillingModeSummary == nil ||
		desc.Table.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
		t.Fatalf("table after Migrate: %+v %v; want ACTIVE and PAY_PER_REQUEST", desc, err)
	}
	other := newTable(t, api)
	_, err = api.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName: &other, BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := dynamostore.New(api, other)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Migrate(context.Background()); !errors.Is(err, dynamostore.ErrTableMismatch) {
		t.Fatalf("Migrate on a table keyed by id: %v, want ErrTableMismatch", err)
	}
	// The same table serves a store whose key attribute is named id.
	s3, err := dynamostore.New(api, other, dynamostore.WithAttributes(dynamostore.Attributes{Key: "id", TTL: "expires_at"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := s3.Reserve(context.Background(), "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("Reserve with renamed attributes: %+v %v", c, err)
	}
}

func TestOptions(t *testing.T) {
	api, _ := client(t, "")
	for name, tc := range map[string]struct {
		table string
		opt   dynamostore.Option
	}{
		"short table":       {"ab", nil},
		"table with space":  {"a b c", nil},
		"empty scope":       {"tbl", dynamostore.WithScope("")},
		"scope with brace":  {"tbl", dynamostore.WithScope("a}")},
		"negative skew":     {"tbl", dynamostore.WithClockSkew(-1)},
		"skew over an hour": {"tbl", dynamostore.WithClockSkew(2 * time.Hour)},
		"nil clock":         {"tbl", dynamostore.WithClock(nil)},
		"negative result":   {"tbl", dynamostore.WithMaxResultSize(-1)},
		"result too large":  {"tbl", dynamostore.WithMaxResultSize(dynamostore.ItemLimit)},
		"same attribute":    {"tbl", dynamostore.WithAttributes(dynamostore.Attributes{Result: "st"})},
		"long attribute":    {"tbl", dynamostore.WithAttributes(dynamostore.Attributes{Key: strings.Repeat("a", 65)})},
	} {
		opts := []dynamostore.Option{}
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		if _, err := dynamostore.New(api, tc.table, opts...); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := dynamostore.New(nil, "tbl"); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	s, err := dynamostore.New(api, "tbl", dynamostore.WithMaxResultSize(10))
	if err != nil || s.MaxResultSize() != 10 {
		t.Fatalf("WithMaxResultSize(10): %v", err)
	}
}

// TestTokenAfterDeletion: when DynamoDB's TTL deletes an item (simulated by
// a DeleteItem; dynalite has no TTL), the key's next token starts from the
// caller's clock in µs, above every token the deleted item had.
func TestTokenAfterDeletion(t *testing.T) {
	api, _ := client(t, "")
	s := newStore(t, api)
	ctx := context.Background()
	var last keystore.Claim
	for i := range 3 {
		c, err := s.Reserve(ctx, "k", nil, time.Minute)
		if err != nil || c.State != keystore.Acquired || c.Token <= last.Token {
			t.Fatalf("Reserve #%d: %+v %v; want a token above %d", i, c, err, last.Token)
		}
		last = c
		if err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Table()),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: s.PartitionKey("k")}},
	}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Reserve(ctx, "k", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired || c.Token <= last.Token || c.Takeover {
		t.Fatalf("Reserve after the item was deleted: %+v %v; want acquired with a token above %d", c, err, last.Token)
	}
}
