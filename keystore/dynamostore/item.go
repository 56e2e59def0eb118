package dynamostore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// The values of the State attribute.
const (
	stInProgress = 1
	stDone       = 2
	stReleased   = 3
)

// exprs holds the expressions of every operation with the store's
// attribute names. DynamoDB rejects a request whose
// ExpressionAttributeNames or ExpressionAttributeValues holds an entry its
// expressions do not use, so each operation has its own maps.
type exprs struct {
	// Reserve: acquired when the item is absent, released, or its lease or
	// result ended (by the caller's clock, less the skew margin). The token
	// is the old one plus one, or, on a new item, the caller's clock in µs
	// plus one (see the package doc on tokens after TTL deletion).
	reserveCond     string
	reserveSet      string // fingerprint given: stored
	reserveSetNoFP  string // no fingerprint: removed
	reserveNames    map[string]string
	completeCond    string // also Release's and Extend's
	completeSet     string // result stored
	completeSetNone string // empty result: no attribute
	completeNames   map[string]string
	releaseSet      string
	releaseNames    map[string]string
	extendSet       string
	extendNames     map[string]string
	getNames        map[string]string
}

func newExprs(a Attributes) *exprs {
	all := map[string]string{"#k": a.Key, "#s": a.State, "#t": a.Token, "#e": a.Expires, "#l": a.TTL, "#n": a.Nonce, "#f": a.Fingerprint, "#r": a.Result}
	pick := func(ph ...string) map[string]string {
		m := make(map[string]string, len(ph))
		for _, p := range ph {
			m[p] = all[p]
		}
		return m
	}
	const base = "SET #s = :prog, #t = if_not_exists(#t, :base) + :one, #e = :exp, #l = :ttl, #n = :n"
	return &exprs{
		reserveCond:     "attribute_not_exists(#k) OR #s = :rel OR #e < :cut",
		reserveSet:      base + ", #f = :fp REMOVE #r",
		reserveSetNoFP:  base + " REMOVE #r, #f",
		reserveNames:    pick("#k", "#s", "#t", "#e", "#l", "#n", "#f", "#r"),
		completeCond:    "#t = :tok AND #s = :prog",
		completeSet:     "SET #s = :done, #e = :exp, #l = :ttl, #r = :res REMOVE #n",
		completeSetNone: "SET #s = :done, #e = :exp, #l = :ttl REMOVE #n, #r",
		completeNames:   pick("#t", "#s", "#e", "#l", "#n", "#r"),
		releaseSet:      "SET #s = :rel, #l = :ttl REMOVE #n, #f, #r, #e",
		releaseNames:    pick("#t", "#s", "#l", "#n", "#f", "#r", "#e"),
		extendSet:       "SET #e = :exp, #l = :ttl",
		extendNames:     pick("#t", "#s", "#e", "#l"),
		getNames:        pick("#s", "#t", "#e", "#n", "#f", "#r"),
	}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func unum(n uint64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(n, 10)}
}

// item is a decoded item. present is false when there was none.
type item struct {
	present   bool
	state     int
	token     uint64
	hasToken  bool
	expires   int64 // ms since the epoch
	nonce, fp []byte
	result    []byte
}

// decode reads the attributes of an item (or of the part of one that
// UpdateItem returned). Attributes of unexpected types are an error: the
// item was not written by this store.
func (s *Store) decode(m map[string]types.AttributeValue) (item, error) {
	it := item{present: len(m) > 0}
	for name, v := range m {
		var err error
		switch name {
		case s.attrs.State:
			var n int64
			n, err = numAttr(v)
			it.state = int(n)
		case s.attrs.Token:
			it.token, err = unumAttr(v)
			it.hasToken = true
		case s.attrs.Expires:
			it.expires, err = numAttr(v)
		case s.attrs.Nonce:
			it.nonce, err = binAttr(v)
		case s.attrs.Fingerprint:
			it.fp, err = binAttr(v)
		case s.attrs.Result:
			it.result, err = binAttr(v)
		}
		if err != nil {
			return item{}, fmt.Errorf("attribute %q: %w", name, err)
		}
	}
	return it, nil
}

func numAttr(v types.AttributeValue) (int64, error) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%T, want a number", v)
	}
	return strconv.ParseInt(n.Value, 10, 64)
}

func unumAttr(v types.AttributeValue) (uint64, error) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%T, want a number", v)
	}
	return strconv.ParseUint(n.Value, 10, 64)
}

func binAttr(v types.AttributeValue) ([]byte, error) {
	b, ok := v.(*types.AttributeValueMemberB)
	if !ok {
		return nil, fmt.Errorf("%T, want binary", v)
	}
	return b.Value, nil
}

// DynamoDB's item size rules
// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html):
// an item's size is the sum, over its attributes, of the name's UTF-8
// length and the value's size: a string's UTF-8 length, a binary's length,
// a number's one byte per two significant digits plus one.

// ItemLimit is DynamoDB's maximum item size, 400 KB.
const ItemLimit = 400 * 1024

// numSize is the most DynamoDB counts for a number of n's digits: one
// byte per two digits, plus one (trailing zeros, which DynamoDB trims, may
// make the real size a byte smaller).
func numSize(n uint64) int { return (len(strconv.FormatUint(n, 10))+1)/2 + 1 }

// maxNumSize is the size of the largest number the store writes (20 digits).
const maxNumSize = 11

// maxResultFor is the largest result that fits in an item of the worst
// case: the longest scope and key, the longest fingerprint, the largest
// numbers. A result that passes it can never make DynamoDB refuse the
// Complete for size.
func maxResultFor(a Attributes) int {
	overhead := len(a.Key) + 2 + keystore.MaxScopeLen + idem.MaxKeyLen +
		len(a.State) + maxNumSize + len(a.Token) + maxNumSize + len(a.Expires) + maxNumSize +
		len(a.TTL) + maxNumSize + len(a.Fingerprint) + idem.MaxFingerprintLen + len(a.Result)
	return ItemLimit - overhead
}

// ItemSize returns the size, by DynamoDB's rules, of the item of a done key
// in scope with a fingerprint of fpLen bytes and a result of resultLen
// bytes, written with attribute names a at time now with a token issued
// around then, at most (a number whose digits end in zeros counts a byte
// less). With [DefaultAttributes], scope "default", a 36-byte key (a UUID), no
// fingerprint and an empty result it is 82 bytes. An in-progress item has
// a nonce (12 bytes) instead of the result.
func ItemSize(a Attributes, scope, key string, fpLen, resultLen int, now time.Time) int {
	exp := uint64(now.UnixMilli())
	size := len(a.Key) + len(scopePrefix(scope)) + len(key) +
		len(a.State) + numSize(stDone) +
		len(a.Token) + numSize(uint64(now.UnixMicro())+1) +
		len(a.Expires) + numSize(exp) +
		len(a.TTL) + numSize(exp/1000)
	if fpLen > 0 {
		size += len(a.Fingerprint) + fpLen
	}
	if resultLen > 0 {
		size += len(a.Result) + resultLen
	}
	return size
}

// WriteUnits returns the write request units DynamoDB charges for writing
// an item of size bytes: one per KB, rounded up. A conditional UpdateItem is
// charged for the larger of the item before and after, and a write whose
// condition fails is charged too.
func WriteUnits(size int) int { return max(1, (size+1023)/1024) }
