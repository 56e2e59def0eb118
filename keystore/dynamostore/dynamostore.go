package dynamostore

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// API is the part of the DynamoDB client the store uses; *dynamodb.Client
// implements it. Retries, throttling backoff, credentials and endpoints are
// the client's: configure them there (the SDK's standard retryer retries
// ProvisionedThroughputExceededException, ThrottlingException and
// RequestLimitExceeded with backoff, three attempts by default).
type API interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// Attributes names the attributes of the store's items. The defaults are
// short on purpose: DynamoDB counts attribute names in every item's size,
// and so in its write units.
type Attributes struct {
	Key         string // partition key, a string: "{scope}key" (default "pk")
	State       string // number: 1 in progress, 2 done, 3 released (default "st")
	Token       string // number: the fencing token (default "tok")
	Expires     string // number: lease or result end, ms since the epoch by the caller's clock (default "ex")
	TTL         string // number: seconds since the epoch, for DynamoDB's TTL deletion only (default "ttl")
	Nonce       string // binary: the reserving call's nonce, while in progress (default "n")
	Fingerprint string // binary: the fingerprint, when one was given (default "fp")
	Result      string // binary: the result, when done and not empty (default "res")
}

// DefaultAttributes are the attribute names of a store not given
// [WithAttributes].
var DefaultAttributes = Attributes{Key: "pk", State: "st", Token: "tok", Expires: "ex", TTL: "ttl", Nonce: "n", Fingerprint: "fp", Result: "res"}

func (a Attributes) list() []string {
	return []string{a.Key, a.State, a.Token, a.Expires, a.TTL, a.Nonce, a.Fingerprint, a.Result}
}

// Option configures [New].
type Option func(*config) error

type config struct {
	scope     string
	attrs     Attributes
	skew      time.Duration
	now       func() time.Time
	maxResult int
	grace     time.Duration
}

// WithScope sets the scope of the store's keys (default
// keystore.DefaultScope). See also [Store.Scope].
func WithScope(name string) Option {
	return option.Valid("dynamostore", keystore.ValidateScope(name), func(c *config) { c.scope = name })
}

// WithAttributes sets the names of the item's attributes; empty fields keep
// their [DefaultAttributes] name. The names must differ from each other and
// be 1 to 64 bytes each.
func WithAttributes(a Attributes) Option {
	return func(c *config) error {
		def := DefaultAttributes.list()
		got := a.list()
		seen := map[string]bool{}
		for i, n := range got {
			if n == "" {
				got[i] = def[i]
			}
			if len(got[i]) > maxAttrName {
				return fmt.Errorf("dynamostore: attribute name %q is longer than %d bytes: %w", got[i], maxAttrName, idem.ErrInvalidOption)
			}
			if seen[got[i]] {
				return fmt.Errorf("dynamostore: attribute name %q is used twice: %w", got[i], idem.ErrInvalidOption)
			}
			seen[got[i]] = true
		}
		c.attrs = Attributes{got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7]}
		return nil
	}
}

// maxAttrName bounds attribute names so that the item overhead, and so
// [Store.MaxResultSize], stays known. DynamoDB itself allows 64 KB.
const maxAttrName = 64

// DefaultClockSkew is the clock skew margin of a store not given
// [WithClockSkew].
const DefaultClockSkew = time.Second

// WithClockSkew sets the clock skew margin d (default [DefaultClockSkew]):
// a lease or result that ends at e by the clock of the store that wrote it
// is taken as expired only when another store's clock reads later than
// e + d. DynamoDB has no server clock in conditions, so times are the
// callers': a holder keeps its whole lease as long as no other caller's
// clock is ahead of its own by more than d. d = 0 trusts the clocks to be
// equal. See the package documentation.
func WithClockSkew(d time.Duration) Option {
	return option.Check("dynamostore", d >= 0 && d <= time.Hour, func(c *config) { c.skew = d }, "clock skew %v: want 0 to 1h", d)
}

// WithClock sets the clock the store reads for leases, results and tokens
// (default time.Now). It is for tests that simulate skewed hosts.
func WithClock(now func() time.Time) Option {
	return option.Check("dynamostore", now != nil, func(c *config) { c.now = now }, "nil clock")
}

// WithMaxResultSize sets the largest result Complete accepts, in bytes
// (default and maximum: what fits in DynamoDB's 400 KB item beside the
// other attributes, see [Store.MaxResultSize]).
func WithMaxResultSize(n int) Option {
	return option.Check("dynamostore", n >= 0, func(c *config) { c.maxResult = n }, "max result size %d is negative", n)
}

// tableName is DynamoDB's rule for table names.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// Store is a [keystore.Store] on one DynamoDB table. See the package
// documentation.
type Store struct {
	api       API
	table     string
	prefix    string // "{scope}"
	attrs     Attributes
	skew      time.Duration
	now       func() time.Time
	maxResult int
	grace     time.Duration
	ex        *exprs
}

// New returns a store on table through api (a *dynamodb.Client). The store
// does not own api. Create the table with [Store.Migrate], or by your own
// means with a string partition key named as Attributes.Key says and no
// sort key. Bad options return an error wrapping idem.ErrInvalidOption.
func New(api API, table string, opts ...Option) (*Store, error) {
	cfg := config{scope: keystore.DefaultScope, attrs: DefaultAttributes, skew: DefaultClockSkew, now: time.Now, maxResult: -1, grace: time.Hour}
	if err := option.Apply("dynamostore", &cfg, opts); err != nil {
		return nil, err
	}
	limit := maxResultFor(cfg.attrs)
	switch {
	case api == nil:
		return nil, fmt.Errorf("dynamostore: nil client: %w", idem.ErrInvalidOption)
	case !tableName.MatchString(table):
		return nil, fmt.Errorf("dynamostore: table name %q: want 3 to 255 of a-z A-Z 0-9 _ . -: %w", table, idem.ErrInvalidOption)
	case cfg.maxResult > limit:
		return nil, fmt.Errorf("dynamostore: max result size %d: at most %d fits in a DynamoDB item: %w", cfg.maxResult, limit, idem.ErrInvalidOption)
	case cfg.maxResult < 0:
		cfg.maxResult = limit
	}
	return &Store{
		api: api, table: table, prefix: scopePrefix(cfg.scope), attrs: cfg.attrs, skew: cfg.skew,
		now: cfg.now, maxResult: cfg.maxResult, grace: cfg.grace + cfg.skew, ex: newExprs(cfg.attrs),
	}, nil
}

func scopePrefix(scope string) string { return "{" + scope + "}" }

// Scope returns a view of the same table in which keys live in the scope
// name: their partition key is "{name}key", and neither scopes nor keys
// contain NUL and scopes contain no '}', so no two (scope, key) pairs share
// an item. It implements [keystore.Scoper].
func (s *Store) Scope(name string) (keystore.Store, error) {
	if err := keystore.ValidateScope(name); err != nil {
		return nil, fmt.Errorf("dynamostore: %w", err)
	}
	v := *s
	v.prefix = scopePrefix(name)
	return &v, nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// MaxResultSize returns the largest result Complete accepts.
func (s *Store) MaxResultSize() int { return s.maxResult }

// PartitionKey returns the partition key value of key's item, for
// operators and tests.
func (s *Store) PartitionKey(key string) string { return s.prefix + key }
