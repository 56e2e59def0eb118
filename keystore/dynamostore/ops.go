package dynamostore

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idem-go/idem"

	"github.com/idem-go/idem/keystore"
)

// maxAttempts bounds how often Reserve repeats its write when a server that
// does not return the item with a failed condition (see the package doc)
// shows, on the read that follows, a key that has become reservable since.
const maxAttempts = 4

var errItem = errors.New("unexpected item")

// ceilMs is d in whole milliseconds, rounded up, at least 1: a lease of 1 ns
// lasts 1 ms, never 0.
func ceilMs(d time.Duration) int64 { return max(1, int64((d+time.Millisecond-1)/time.Millisecond)) }

// ttlAttr is the TTL attribute for an item whose lease or result ends at
// expMs: a grace period (an hour plus the skew margin) later, so that a
// lapsed lease is still seen (and reported as a takeover) and so that, when
// DynamoDB deletes the item, every caller's clock is past its last token.
func (s *Store) ttlAttr(expMs int64) types.AttributeValue {
	return num(expMs/1000 + 1 + int64(s.grace/time.Second))
}

// Reserve implements [keystore.Store.Reserve] with one conditional
// UpdateItem: it acquires the key when the item is absent, released, or its
// lease or result ended more than the skew margin ago by this store's
// clock, and increments the fencing token in the same write. When the
// condition fails, DynamoDB returns the item (ReturnValuesOnConditionCheckFailure
// ALL_OLD), from which Reserve answers InProgress, Done or
// ErrFingerprintMismatch without a second request; a server that does not
// return it (dynalite, DynamoDB Local before 2023) costs one strongly
// consistent GetItem more.
//
// Once the request is sent, it runs to its answer even if ctx is cancelled
// (bounded by keystore.CallTimeout), so that a cancelled Reserve never holds
// a key that nobody knows about. If the answer is lost anyway (a timeout, a
// connection that failed after the write), the caller gets an error and the
// lease expires by itself; when the SDK retries the request, Reserve
// recognises its own lease by a per-call nonce and answers Acquired.
// Throttling is retried by the client's retryer and then returned as an
// error: fail closed.
//
// Crash: a process that dies after the write leaves the key in progress
// until its lease, plus the skew margin, has passed by the next caller's
// clock; that caller then takes it over with a higher token (Takeover
// true). One that dies before the write lands leaves nothing.
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateReserve(key, fp, lease); err != nil {
		return keystore.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return keystore.Claim{}, fmt.Errorf("dynamostore: reserve: %w", err)
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	r := s.reserveInput(key, fp, nonce[:], keystore.CapDuration(lease))
	in, base, expMs, cut := r.in, r.base, r.expMs, r.cut
	for range maxAttempts {
		out, err := s.api.UpdateItem(dctx, in)
		if err == nil {
			old, err := s.decode(out.Attributes)
			if err != nil {
				return keystore.Claim{}, fmt.Errorf("dynamostore: reserve %q: %w: %w", key, errItem, err)
			}
			tok := uint64(base)
			if old.hasToken {
				tok = old.token
			}
			return keystore.Claim{Key: key, State: keystore.Acquired, Token: tok + 1, Expires: time.UnixMilli(expMs),
				Takeover: old.present && old.state == stInProgress}, nil
		}
		cur, err := s.failedItem(dctx, key, err)
		if err != nil {
			return keystore.Claim{}, fmt.Errorf("dynamostore: reserve: %w", err)
		}
		c, reservable, err := answer(key, cur, fp, nonce[:], cut)
		if !reservable {
			return c, err
		}
		// Only after a separate read: the key was freed between the
		// write and the read. Write again.
	}
	return keystore.Claim{}, fmt.Errorf("dynamostore: reserve %q: the key changed state %d times during the call", key, maxAttempts)
}

// reserveReq is Reserve's request and the values its answer is read with.
type reserveReq struct {
	in               *dynamodb.UpdateItemInput
	base, expMs, cut int64
}

func (s *Store) reserveInput(key string, fp, nonce []byte, lease time.Duration) reserveReq {
	now := s.now()
	nowMs := now.UnixMilli()
	r := reserveReq{base: now.UnixMicro(), expMs: nowMs + ceilMs(lease), cut: nowMs - s.skew.Milliseconds()}
	vals := map[string]types.AttributeValue{
		":rel": num(stReleased), ":cut": num(r.cut), ":prog": num(stInProgress),
		":base": num(r.base), ":one": num(1), ":exp": num(r.expMs), ":ttl": s.ttlAttr(r.expMs),
		":n": &types.AttributeValueMemberB{Value: nonce},
	}
	update := s.ex.reserveSetNoFP
	if len(fp) > 0 {
		update = s.ex.reserveSet
		vals[":fp"] = &types.AttributeValueMemberB{Value: fp}
	}
	r.in = &dynamodb.UpdateItemInput{
		TableName:                           &s.table,
		Key:                                 s.keyOf(key),
		ConditionExpression:                 &s.ex.reserveCond,
		UpdateExpression:                    &update,
		ExpressionAttributeNames:            s.ex.reserveNames,
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueUpdatedOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	return r
}

// answer is Reserve's outcome for a live item it could not acquire, or
// reservable when the item (read after the failed write) is not live.
func answer(key string, it item, fp, nonce []byte, cut int64) (c keystore.Claim, reservable bool, err error) {
	if !it.present || it.state == stReleased || it.expires < cut {
		return keystore.Claim{}, true, nil
	}
	c = keystore.Claim{Key: key, Expires: time.UnixMilli(it.expires)}
	switch {
	case it.state == stInProgress && bytes.Equal(it.nonce, nonce):
		// The SDK retried our own write after a lost answer.
		c.State, c.Token = keystore.Acquired, it.token
	case idem.FingerprintsConflict(it.fp, fp):
		return keystore.Claim{}, false, keystore.MismatchError(key)
	case it.state == stInProgress:
		c.State = keystore.InProgress
	case it.state == stDone:
		c.State, c.Result = keystore.Done, it.result
	default:
		return keystore.Claim{}, false, fmt.Errorf("dynamostore: reserve %q: %w: state %d", key, errItem, it.state)
	}
	return c, false, nil
}

// failedItem returns the item as it was when err, the error of a
// conditional write, says the condition failed: from the error itself, or
// from a strongly consistent read when the server did not include it. Any
// other error is returned as it is.
func (s *Store) failedItem(ctx context.Context, key string, err error) (item, error) {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return item{}, err
	}
	m := ccf.Item
	if m == nil {
		out, gerr := s.api.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: &s.table, Key: s.keyOf(key), ConsistentRead: aws.Bool(true),
			ProjectionExpression: aws.String("#s, #t, #e, #n, #f, #r"), ExpressionAttributeNames: s.ex.getNames,
		})
		if gerr != nil {
			return item{}, gerr
		}
		m = out.Item
	}
	it, derr := s.decode(m)
	if derr != nil {
		return item{}, fmt.Errorf("key %q: %w: %w", key, errItem, derr)
	}
	return it, nil
}

func (s *Store) keyOf(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.attrs.Key: &types.AttributeValueMemberS{Value: s.prefix + key}}
}

// fenced runs a conditional UpdateItem that applies only while c.Token is
// the key's token and the key is in progress. When the condition fails, it
// returns nil if the item shows that the same token already did what this
// call does (state already), else ErrLeaseLost.
func (s *Store) fenced(ctx context.Context, op string, c keystore.Claim, update string, names map[string]string, vals map[string]types.AttributeValue, already int) error {
	vals[":tok"], vals[":prog"] = unum(c.Token), num(stInProgress)
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	_, err := s.api.UpdateItem(dctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.table,
		Key:                                 s.keyOf(c.Key),
		ConditionExpression:                 &s.ex.completeCond,
		UpdateExpression:                    &update,
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return nil
	}
	cur, err := s.failedItem(dctx, c.Key, err)
	if err != nil {
		return fmt.Errorf("dynamostore: %s: %w", op, err)
	}
	if already != 0 && cur.present && cur.hasToken && cur.token == c.Token && cur.state == already {
		return nil
	}
	return keystore.LeaseLostError(op, c.Key, c.Token)
}

// Complete implements [keystore.Store.Complete] with one conditional
// UpdateItem on the claim's token: state done, the result, and an expiry
// ttl from now by this store's clock. A result larger than
// [Store.MaxResultSize] is ErrResultTooLarge before any I/O. Like Reserve
// it runs to its answer once sent; a Complete whose answer was lost and
// that is repeated (by the SDK or the caller) finds the key done under its
// own token and returns nil, keeping the first result.
//
// Crash: a process that dies before the write lands leaves the key in
// progress under its lease, which then expires and lets a retry run the
// effect again (send the key downstream too); one that dies after it leaves
// the key done.
func (s *Store) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	if err := keystore.ValidateComplete(c, result, ttl, s.maxResult); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dynamostore: complete: %w", err)
	}
	expMs := s.now().UnixMilli() + ceilMs(keystore.CapDuration(ttl))
	vals := map[string]types.AttributeValue{":done": num(stDone), ":exp": num(expMs), ":ttl": s.ttlAttr(expMs)}
	update := s.ex.completeSetNone
	if len(result) > 0 {
		update = s.ex.completeSet
		vals[":res"] = &types.AttributeValueMemberB{Value: result}
	}
	return s.fenced(ctx, "complete", c, update, s.ex.completeNames, vals, stDone)
}

// Release implements [keystore.Store.Release] with one conditional
// UpdateItem on the claim's token. The item is not deleted but marked
// released, keeping its token, so that the next Reserve's token is higher
// (DynamoDB's TTL deletes it later). A Release repeated after a lost answer
// finds the key released under its own token and returns nil.
//
// Crash: if the process dies before the write lands, the lease expires on
// its own, later.
func (s *Store) Release(ctx context.Context, c keystore.Claim) error {
	if err := keystore.ValidateRelease(c); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dynamostore: release: %w", err)
	}
	vals := map[string]types.AttributeValue{":rel": num(stReleased), ":ttl": s.ttlAttr(s.now().UnixMilli())}
	return s.fenced(ctx, "release", c, s.ex.releaseSet, s.ex.releaseNames, vals, stReleased)
}

// Extend renews the lease of c to end lease from now by this store's clock,
// with one conditional UpdateItem on the claim's token, and returns the
// claim with its new Expires. It fails with ErrLeaseLost when the key was
// taken over, released or completed; like Complete, it succeeds on a lease
// that lapsed if nobody has taken the key over, because then nobody else
// can have started. It is the fenced renewal that keystore's Extender
// interface describes. If it returns an error that is not ErrLeaseLost,
// the lease may or may not have been renewed: keep the old Expires.
//
// Crash: a renewal that did not land leaves the old lease, which expires as
// if Extend had not been called.
var _ keystore.Extender = (*Store)(nil)

func (s *Store) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateRelease(c); err != nil {
		return keystore.Claim{}, err
	}
	if lease <= 0 {
		return keystore.Claim{}, fmt.Errorf("dynamostore: lease %v is not positive: %w", lease, idem.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return keystore.Claim{}, fmt.Errorf("dynamostore: extend: %w", err)
	}
	expMs := s.now().UnixMilli() + ceilMs(keystore.CapDuration(lease))
	vals := map[string]types.AttributeValue{":exp": num(expMs), ":ttl": s.ttlAttr(expMs)}
	if err := s.fenced(ctx, "extend", c, s.ex.extendSet, s.ex.extendNames, vals, 0); err != nil {
		return keystore.Claim{}, err
	}
	c.Expires = time.UnixMilli(expMs)
	return c, nil
}
