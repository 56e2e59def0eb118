package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/keystore"
)

var (
	_ keystore.Inspector = (*Store)(nil)
	_ keystore.Forgetter = (*Store)(nil)
)

// Scanner is the optional part of [API] that [Store.List] needs;
// *dynamodb.Client implements it.
type Scanner interface {
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// info converts an item to a KeyInfo, or reports false for an item that
// is not a key: absent, released, or a result that expired (by this
// store's clock less the skew margin, as Reserve decides).
func (s *Store) info(key string, it item, withResult bool) (keystore.KeyInfo, bool) {
	if !it.present || it.state == stReleased {
		return keystore.KeyInfo{}, false
	}
	k := keystore.KeyInfo{Key: key, Token: it.token, Expires: time.UnixMilli(it.expires), Fingerprint: keystore.HexFingerprint(it.fp)}
	switch it.state {
	case stInProgress:
		k.State = keystore.InProgress
	case stDone:
		if it.expires < s.now().Add(-s.skew).UnixMilli() {
			return keystore.KeyInfo{}, false
		}
		k.State, k.ResultSize = keystore.Done, len(it.result)
		if withResult {
			k.Result = it.result
			if k.Result == nil {
				k.Result = []byte{}
			}
		}
	default:
		return keystore.KeyInfo{}, false
	}
	return k, true
}

// Inspect implements [keystore.Inspector] with one strongly consistent
// GetItem. Expires is by the writer's clock, as every expiry in this store.
func (s *Store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return keystore.KeyInfo{}, err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	out, err := s.api.GetItem(dctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: s.keyOf(key), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("#s, #t, #e, #n, #f, #r"), ExpressionAttributeNames: s.ex.getNames,
	})
	if err != nil {
		return keystore.KeyInfo{}, fmt.Errorf("dynamostore: inspect: %w", err)
	}
	it, err := s.decode(out.Item)
	if err != nil {
		return keystore.KeyInfo{}, fmt.Errorf("dynamostore: inspect %q: %w: %w", key, errItem, err)
	}
	k, ok := s.info(key, it, true)
	if !ok {
		return keystore.KeyInfo{}, keystore.NotFoundError(key)
	}
	return k, nil
}

// List implements [keystore.Inspector] with one strongly consistent Scan
// of the table per page, filtered to the store's scope (and state) on the
// server: a Scan reads the whole table, paying for every item it reads,
// so list sparingly on large tables. The cursor is the last partition key
// read. The client must implement [Scanner] (*dynamodb.Client does); if it
// does not, List fails with errors.ErrUnsupported.
func (s *Store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	opts, err := keystore.ValidateList(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	sc, ok := s.api.(Scanner)
	if !ok {
		return nil, "", fmt.Errorf("dynamostore: list: %T has no Scan: %w", s.api, errors.ErrUnsupported)
	}
	names := map[string]string{"#k": s.attrs.Key, "#s": s.attrs.State, "#t": s.attrs.Token, "#e": s.attrs.Expires, "#f": s.attrs.Fingerprint, "#r": s.attrs.Result}
	vals := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: s.prefix}}
	filter := "begins_with(#k, :p)"
	switch opts.State {
	case keystore.InProgress:
		filter += " AND #s = :st"
		vals[":st"] = num(stInProgress)
	case keystore.Done:
		filter += " AND #s = :st"
		vals[":st"] = num(stDone)
	default:
		filter += " AND #s <> :st"
		vals[":st"] = num(stReleased)
	}
	in := &dynamodb.ScanInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true), Limit: aws.Int32(int32(opts.Limit)),
		FilterExpression: &filter, ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		ProjectionExpression: aws.String("#k, #s, #t, #e, #f, #r"),
	}
	if opts.After != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{s.attrs.Key: &types.AttributeValueMemberS{Value: opts.After}}
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	out, err := sc.Scan(dctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("dynamostore: list: %w", err)
	}
	var keys []keystore.KeyInfo
	for _, m := range out.Items {
		pk, _ := m[s.attrs.Key].(*types.AttributeValueMemberS)
		if pk == nil || !strings.HasPrefix(pk.Value, s.prefix) {
			continue
		}
		delete(m, s.attrs.Key)
		it, err := s.decode(m)
		if err != nil {
			return nil, "", fmt.Errorf("dynamostore: list %q: %w: %w", pk.Value, errItem, err)
		}
		if k, ok := s.info(strings.TrimPrefix(pk.Value, s.prefix), it, false); ok {
			keys = append(keys, k)
		}
	}
	next := ""
	if last, ok := out.LastEvaluatedKey[s.attrs.Key].(*types.AttributeValueMemberS); ok {
		next = last.Value
	}
	return keys, next, nil
}

// Forget implements [keystore.Forgetter] with one conditional UpdateItem:
// a done key is marked released, keeping its token (as Release does), so
// that the next Reserve runs the effect again with a higher token.
func (s *Store) Forget(ctx context.Context, key string) error {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	nowMs := s.now().UnixMilli()
	_, err := s.api.UpdateItem(dctx, &dynamodb.UpdateItemInput{
		TableName:           &s.table,
		Key:                 s.keyOf(key),
		ConditionExpression: aws.String("#s = :done AND #e >= :cut"),
		UpdateExpression:    aws.String("SET #s = :rel, #l = :ttl REMOVE #n, #f, #r, #e"),
		ExpressionAttributeNames: map[string]string{
			"#s": s.attrs.State, "#e": s.attrs.Expires, "#l": s.attrs.TTL, "#n": s.attrs.Nonce, "#f": s.attrs.Fingerprint, "#r": s.attrs.Result,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":done": num(stDone), ":rel": num(stReleased), ":cut": num(nowMs - s.skew.Milliseconds()), ":ttl": s.ttlAttr(nowMs),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return nil
	}
	cur, err := s.failedItem(dctx, key, err)
	if err != nil {
		return fmt.Errorf("dynamostore: forget: %w", err)
	}
	if cur.present && cur.state == stInProgress {
		return keystore.ForgetInProgressError(key)
	}
	return keystore.NotFoundError(key)
}
