package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// DefaultPrefix is prepended to every Redis key unless WithPrefix says
// otherwise.
const DefaultPrefix = "idem:"

// Option configures [New]. An option that is given a bad value makes New
// return an error wrapping idem.ErrInvalidOption.
type Option func(*config) error

type config struct {
	prefix      string
	scope       string
	maxResult   int
	inFlight    int
	buckets     int
	waitN       int
	waitTimeout time.Duration
}

// WithPrefix sets the prefix of every Redis key the store writes (default
// [DefaultPrefix]). It may be empty; it must not contain '{' or '}', which
// would change the Cluster hash tag, and is at most 64 bytes.
func WithPrefix(p string) Option {
	return option.Check("redisstore", len(p) <= 64 && !strings.ContainsAny(p, "{}"), func(c *config) { c.prefix = p }, "prefix %q: want at most 64 bytes without '{' or '}'", p)
}

// WithScope sets the scope of the store's keys (default
// keystore.DefaultScope). See also [Store.Scope].
func WithScope(name string) Option {
	return option.Valid("redisstore", keystore.ValidateScope(name), func(c *config) { c.scope = name })
}

// WithMaxResultSize sets the largest result Complete accepts, in bytes
// (default keystore.DefaultMaxResultSize).
func WithMaxResultSize(n int) Option {
	return option.Check("redisstore", n >= 0, func(c *config) { c.maxResult = n }, "max result size %d is negative", n)
}

// DefaultMaxInFlight is how many round trips to Redis a store has in flight
// at once before further calls wait and share a pipeline; see
// WithMaxInFlight.
const DefaultMaxInFlight = 4

// WithMaxInFlight sets how many round trips to Redis the store (and its
// scopes) keeps in flight at once (default [DefaultMaxInFlight]). A call that
// finds one free goes out at once; the calls that find none wait, and the
// first round trip to end sends them all as one pipeline. 0 sends every call
// on its own, as plain go-redis calls. A store on an *redis.AutoPipeliner
// defaults to 0: the autopipeliner batches already. go-redis hooks (tracing,
// metrics) see the calls that went out together as one pipeline, through
// their ProcessPipelineHook.
func WithMaxInFlight(n int) Option {
	return option.Check("redisstore", n >= 0, func(c *config) { c.inFlight = n }, "max in flight %d is negative", n)
}

// MaxBuckets is the most hash tags a scope may spread over: the number of
// Redis Cluster slots.
const MaxBuckets = 16384

// WithBuckets spreads each scope's keys over n hash tags (default 1), so
// that a busy scope is served by every master of a Cluster instead of the
// one that owns its slot. A key's bucket is a hash of the key; its record
// and the bucket's token counter share the bucket's tag, so every script
// still touches one slot. With 1 the layout is exactly that of earlier
// versions (PREFIX{scope}:…); with n > 1 keys live under PREFIX{scope{b}:…,
// b in [0, n).
//
// n is part of the layout, like the prefix: every process sharing a scope
// must use the same n, and changing it on live data hides the keys written
// under the old n (their leases and results are not found, so their effects
// may run again). To change it, start the new n under a new prefix and
// keep the old deployment draining until its longest TTL has passed, or
// change it while no key is live (docs/scale.md). 64 spreads a scope over
// a 3- to 10-master cluster evenly enough; counters cost one small key per
// bucket and scope.
func WithBuckets(n int) Option {
	return option.Check("redisstore", n >= 1 && n <= MaxBuckets, func(c *config) { c.buckets = n }, "%d buckets: want 1 to %d", n, MaxBuckets)
}

// WithWaitReplicas makes every write wait until n replicas have
// acknowledged it, for at most timeout: the script and a WAIT go out
// together on one connection to the key's master, one round trip (these
// calls are not batched). A write that fewer than n replicas acknowledged
// in time returns an error wrapping [ErrNotReplicated]: do not acknowledge
// the message upstream. What that leaves:
//
//   - Reserve: the lease is on the master and perhaps some replicas; the
//     store releases it at once (best effort, not waited for) and returns
//     the error, so nobody runs the effect and a retry finds the key free
//     (or, if that release was lost too, in progress until the lease ends).
//   - Complete: the result is on the master; if the master stays, a retry
//     finds it done; if a replica without it takes over, the retry finds the
//     (replicated) lease and takes it over when it ends, and the effect runs
//     again, as after a crash before Complete.
//   - Release: the key is free on the master; after a failover the lease
//     may be back, and expires.
//
// With it, a failover that promotes a replica which acknowledged loses no
// acknowledged write (with several replicas per master, promote the most
// up-to-date: Redis Cluster and Sentinel do). The client's ReadTimeout must
// exceed timeout, or a WAIT that is still waiting is cut as a timeout.
// Prefer min-replicas-to-write on the servers when every client of the
// Redis should be held to it (docs/scale.md).
func WithWaitReplicas(n int, timeout time.Duration) Option {
	ok := n >= 0 && (n == 0 || timeout >= time.Millisecond)
	return option.Check("redisstore", ok, func(c *config) { c.waitN, c.waitTimeout = n, timeout },
		"wait for %d replicas with timeout %v: want n ≥ 0 and a timeout of at least 1ms", n, timeout)
}

// Store is a [keystore.Store] on Redis. See the package documentation.
type Store struct {
	conn      *batcher // sends the scripts, sharing pipelines under load
	prefix    string
	scope     string
	buckets   int    // hash tags per scope; 1: the tag is the scope alone
	base      string // PREFIX{scope}: when buckets is 1
	maxResult int
	wait      *waitReplicas // nil: writes are not waited for
	hub       *hub          // waiters' subscriptions (notify.go)
	// complete and release are the scripts that publish with PUBLISH, or
	// SPUBLISH on a Cluster.
	complete, release script
}

// New returns a store on rdb: a *redis.Client, a Sentinel failover client
// or a *redis.ClusterClient. The store does not own rdb and never closes it.
// Bad options return an error wrapping idem.ErrInvalidOption.
func New(rdb redis.UniversalClient, opts ...Option) (*Store, error) {
	cfg := config{prefix: DefaultPrefix, scope: keystore.DefaultScope, maxResult: keystore.DefaultMaxResultSize, inFlight: DefaultMaxInFlight, buckets: 1}
	_, auto := rdb.(*redis.AutoPipeliner)
	if auto {
		cfg.inFlight = 0
	}
	if rdb == nil {
		return nil, fmt.Errorf("redisstore: nil client: %w", idem.ErrInvalidOption)
	}
	if err := option.Apply("redisstore", &cfg, opts); err != nil {
		return nil, err
	}
	if cfg.waitN > 0 && auto {
		return nil, fmt.Errorf("redisstore: WithWaitReplicas needs a client whose pipelines keep one connection, not an *AutoPipeliner: %w", idem.ErrInvalidOption)
	}
	s := &Store{conn: &batcher{rdb: rdb, slots: cfg.inFlight}, prefix: cfg.prefix, scope: cfg.scope, buckets: cfg.buckets, maxResult: cfg.maxResult}
	s.base = s.prefix + "{" + s.scope + "}:"
	s.hub = newHub(rdb)
	s.complete, s.release = completeScript, releaseScript
	if s.hub.sharded {
		s.complete, s.release = completeScriptSharded, releaseScriptSharded
	}
	if cfg.waitN > 0 {
		s.wait = &waitReplicas{n: cfg.waitN, ms: cfg.waitTimeout.Milliseconds()}
	}
	return s, nil
}

// Scope returns a view of the same Redis in which keys live in the scope
// name: under the hash tag {name} (one Cluster slot for the whole scope)
// or, with WithBuckets(n), n > 1, under n tags {name{0} … {name{n-1}, each
// with its own token counter. It implements [keystore.Scoper].
func (s *Store) Scope(name string) (keystore.Store, error) {
	if err := keystore.ValidateScope(name); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	v := *s
	v.scope = name
	v.base = s.prefix + "{" + name + "}:"
	return &v, nil
}

// tag returns the part of key's Redis keys up to and including the hash
// tag: PREFIX{scope}: with one bucket, PREFIX{scope{b}: with more, b the
// key's bucket. Scopes cannot contain '{', so no scope's tag is another
// scope's bucket tag.
func (s *Store) tag(key string) string {
	if s.buckets == 1 {
		return s.base
	}
	return s.prefix + "{" + s.scope + "{" + strconv.Itoa(bucketOf(key, s.buckets)) + "}:"
}

// bucketOf is key's bucket: FNV-1a (32 bits) of the key modulo n.
func bucketOf(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// MaxResultSize returns the largest result Complete accepts.
func (s *Store) MaxResultSize() int { return s.maxResult }

// RedisKey returns the Redis key that holds key, for operators and tests.
// Its value is six MessagePack values (state, token, expiry, nonce,
// fingerprint, result). Keys written by versions before the string format
// lived under "k:" as hashes; they are ignored and expire on their own.
func (s *Store) RedisKey(key string) string { return s.tag(key) + "s:" + key }

// CounterKey returns the Redis key of the token counter that key's bucket
// uses, for operators and tests. It has no expiry.
func (s *Store) CounterKey(key string) string { return s.tag(key) + "t" }

// Reserve implements [keystore.Store.Reserve] with one Lua script (EVALSHA,
// falling back to EVAL): one round trip, atomic on the server. The lease is
// measured by Redis's TIME and the key's PX expiry. If the connection fails
// after the script ran, the caller gets an error and the lease expires by
// itself; when go-redis retries the call, the script recognises its own
// lease by a per-call nonce and answers Acquired again.
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateReserve(key, fp, lease); err != nil {
		return keystore.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return keystore.Claim{}, fmt.Errorf("redisstore: reserve: %w", err)
	}
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	ms := millis(lease)
	tag := s.tag(key)
	rkey := tag + "s:" + key
	cmd, err := eval(ctx, s, rkey, redis.NewStringCmd, reserveScript, 2, rkey, tag+"t", fp, ms, nonce[:])
	if err != nil {
		if errors.Is(err, ErrNotReplicated) {
			s.releaseUnreplicated(ctx, rkey, cmd.Val())
		}
		return keystore.Claim{}, fmt.Errorf("redisstore: reserve: %w", err)
	}
	code, token, exp, result, takeover, err := parseReserve(cmd.Val())
	if err != nil {
		return keystore.Claim{}, fmt.Errorf("redisstore: reserve: %w", err)
	}
	c := keystore.Claim{Key: key, Expires: time.UnixMilli(exp)}
	switch code {
	case 0:
		c.State, c.Token, c.Takeover = keystore.Acquired, uint64(token), takeover == 1
	case 1:
		c.State = keystore.InProgress
	case 2:
		c.State, c.Result = keystore.Done, []byte(result)
	default:
		return keystore.Claim{}, keystore.MismatchError(key)
	}
	return c, nil
}

// millis is a lease or TTL in whole milliseconds, the unit of PX and of
// the scripts' arithmetic: capped at keystore.MaxDuration (about 3.2e12
// ms, so that now plus twice it stays an exact Lua double and far below
// Redis's PX limit) and rounded up, so that a lease is never shorter than
// asked and never 0.
func millis(d time.Duration) int64 {
	d = keystore.CapDuration(d)
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

var errReply = errors.New("unexpected script reply")

// parseReserve splits the reserve script's reply, "code token expires
// takeover result".
func parseReserve(v string) (code, token, exp int64, result string, takeover int64, err error) {
	rest := v
	var f [4]int64
	for i := range f {
		field, tail, ok := strings.Cut(rest, " ")
		if !ok {
			return 0, 0, 0, "", 0, fmt.Errorf("%w: %q", errReply, v)
		}
		n, perr := strconv.ParseInt(field, 10, 64)
		if perr != nil {
			return 0, 0, 0, "", 0, fmt.Errorf("%w: %q", errReply, v)
		}
		f[i], rest = n, tail
	}
	if f[0] < 0 || f[0] > 3 || f[3] < 0 || f[3] > 1 || (rest != "" && f[0] != 2) {
		return 0, 0, 0, "", 0, fmt.Errorf("%w: %q", errReply, v)
	}
	return f[0], f[1], f[2], rest, f[3], nil
}

// script is a Lua script and its SHA1.
type script struct{ src, hash string }

func newScript(src string) script { return script{src: src, hash: redis.NewScript(src).Hash()} }

// eval runs sc by its SHA1 and, if Redis does not have it cached (NOSCRIPT:
// a restart, a failover, SCRIPT FLUSH), by its source, which caches it
// again. args are the key count, the keys and the arguments. newCmd makes the
// command that reads the reply (a StringCmd reads a flat string without the
// generic reply's allocations).
// rkey is the Redis key the script writes, which routes the script and
// its WAIT to the key's master when the store waits for replicas.
func eval[C redis.Cmder](ctx context.Context, s *Store, rkey string, newCmd func(context.Context, ...any) C, sc script, args ...any) (C, error) {
	a := make([]any, 2, 2+len(args))
	a[0], a[1] = "evalsha", sc.hash
	a = append(a, args...)
	cmd := newCmd(ctx, a...)
	err := s.send(ctx, rkey, cmd)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		a[0], a[1] = "eval", sc.src
		cmd = newCmd(ctx, a...)
		err = s.send(ctx, rkey, cmd)
	}
	return cmd, err
}

// send runs cmd through the batcher or, when the store waits for
// replicas, with its WAIT on one connection to the key's master.
func (s *Store) send(ctx context.Context, rkey string, cmd redis.Cmder) error {
	if s.wait == nil {
		return s.conn.process(ctx, cmd)
	}
	return s.wait.process(ctx, s.conn.rdb, rkey, cmd)
}

// Complete implements [keystore.Store.Complete] with one Lua script; the
// TTL is the key's PX expiry, set by Redis at completion. A Complete that
// go-redis retries after a lost reply returns nil, as the script treats a
// key already completed by the same token as success.
func (s *Store) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	if err := keystore.ValidateComplete(c, result, ttl, s.maxResult); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	if result == nil {
		result = []byte{}
	}
	ms := millis(ttl)
	rkey := s.RedisKey(c.Key)
	cmd, err := eval(ctx, s, rkey, redis.NewIntCmd, s.complete, 1, rkey, strconv.FormatUint(c.Token, 10), result, ms)
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	if cmd.Val() != 1 {
		return keystore.LeaseLostError("complete", c.Key, c.Token)
	}
	return nil
}

// Release implements [keystore.Store.Release] with one Lua script. If the
// reply is lost and go-redis retries, the retry finds the key gone and
// reports ErrLeaseLost although the release happened.
func (s *Store) Release(ctx context.Context, c keystore.Claim) error {
	if err := keystore.ValidateRelease(c); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	rkey := s.RedisKey(c.Key)
	cmd, err := eval(ctx, s, rkey, redis.NewIntCmd, s.release, 1, rkey, strconv.FormatUint(c.Token, 10))
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	if cmd.Val() != 1 {
		return keystore.LeaseLostError("release", c.Key, c.Token)
	}
	return nil
}
