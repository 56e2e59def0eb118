package memstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/compact"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// ErrFull is returned by Reserve when the store holds its maximum number of
// keys and none of them has expired. It is keystore.ErrFull.
var ErrFull = keystore.ErrFull

const (
	numShards = 64
	// DefaultMaxKeys is the key limit unless WithMaxKeys says otherwise.
	DefaultMaxKeys = 1 << 20
	// sampleSize is how many entries an insert inspects for expired ones
	// when its shard may hold some: bounded work per call, no global pass.
	sampleSize = 8
	// sampleBackoff is how long a shard is not sampled after a sample found
	// nothing expired.
	sampleBackoff = int64(100 * time.Millisecond)
	// Entry states. An absent key has no entry.
	stInProgress = 1
	stDone       = 2
)

// Option configures [New]. Options are checked once, by New; a bad one
// makes New return an error wrapping idem.ErrInvalidOption.
type Option func(*config) error

type config struct {
	maxKeys   int
	capacity  int
	maxResult int
	maxBytes  int64
	clock     func() time.Time
	clockSet  bool
}

// WithMaxKeys bounds the number of keys held, live or expired but not yet
// reclaimed (default [DefaultMaxKeys]). When the store is full, Reserve of a
// new key first reclaims expired keys, and if none have expired returns
// ErrFull: a live key is never evicted, since evicting one would let its
// effect run twice.
func WithMaxKeys(n int) Option {
	return option.Check("memstore", n > 0, func(c *config) { c.maxKeys = n }, "max keys %d is not positive", n)
}

// WithCapacity sizes the compact tier's indexes (completed keys with an
// empty result and no request fingerprint, see the package documentation)
// for n such keys (n > 0) from the start, as a size hint to make(map, n)
// does: filling the store up to n of them then never grows an index (no
// keys moved, no second index while they move). The indexes, 5.8 bytes a
// key of n, are held from New on whatever the count, and are not shrunk
// below it when keys expire; records are still allocated as keys
// complete. It does not bound the store: see WithMaxKeys.
func WithCapacity(n int) Option {
	return option.Check("memstore", n > 0, func(c *config) { c.capacity = n }, "capacity %d is not positive", n)
}

// WithMaxBytes bounds the bytes of stored results and request
// fingerprints the store holds (default: unbounded; the results' memory is
// then bounded only by WithMaxKeys times WithMaxResultSize). A Complete
// whose result would take the store past n returns an error wrapping
// keystore.ErrResultTooLarge, naming the budget: nothing is written and
// the key stays in progress under the caller's lease, as for a result over
// WithMaxResultSize (idemhttp then completes the key as "not stored": the
// response was delivered, a retry gets 410). Results of up to
// [SmallResult] bytes are always accepted, so that such a completion
// never fails: WithMaxKeys bounds them.
func WithMaxBytes(n int64) Option {
	return option.Check("memstore", n > 0, func(c *config) { c.maxBytes = n }, "max bytes %d is not positive", n)
}

// SmallResult is the size up to which a result is accepted whatever
// WithMaxBytes says.
const SmallResult = 64

// WithMaxResultSize sets the largest result Complete accepts, in bytes
// (default keystore.DefaultMaxResultSize).
func WithMaxResultSize(n int) Option {
	return option.Check("memstore", n >= 0, func(c *config) { c.maxResult = n }, "max result size %d is negative", n)
}

// WithClock replaces time.Now as the store's clock, for tests that move time
// by hand. The clock must not go backwards.
func WithClock(now func() time.Time) Option {
	return option.Check("memstore", now != nil, func(c *config) { c.clock, c.clockSet = now, true }, "nil clock")
}

// Store is an in-memory [keystore.Store]. See the package documentation.
//
// It implements every optional interface of package keystore: leases are
// renewed (Extender), operators can list, inspect and forget keys
// (Inspector, Forgetter; operate.go), and waiters are woken by the
// Complete or Release they wait for (Notifier; notify.go).
type Store struct {
	c      *core
	prefix string // length-prefixed scope, prepended to every key
}

var _ interface {
	keystore.Store
	keystore.Extender
	keystore.Inspector
	keystore.Forgetter
	keystore.Notifier
} = (*Store)(nil)

// core is the state shared by a store and its scoped views.
type core struct {
	shards [numShards]shard
	// fpKey computes the 96-bit keyed fingerprint of every (scope, key),
	// which picks its shard and names it in the pending and compact tiers:
	// SipHash-2-4 (New), or AES-128 for a canonical lowercase UUID key and
	// SipHash for any other (a store restored from a version-2 snapshot;
	// compact.Hasher). A snapshot carries its Key, so a restored store
	// puts every key in the shard it was in (and its tokens keep
	// increasing there).
	fpKey     *compact.Hasher
	clock     func() time.Time
	mono      bool      // clock is time.Now: read only the monotonic clock
	base      time.Time // times are kept as nanoseconds since base
	maxKeys   int64
	maxResult int
	maxBytes  int64 // WithMaxBytes; 0: unbounded
	// doneReserve is the keys each shard's compact tier is sized for
	// (WithCapacity): its share of the capacity, plus three standard
	// deviations of a random key's shard, since shards fill unevenly.
	doneReserve int
	count       atomic.Int64
	closed      atomic.Bool
	// watch holds the keys being waited for ([Store.Notify]), signalled
	// by Complete, Release and Close.
	watch keystore.Watchers
}

type shard struct {
	mu sync.Mutex
	// t is the map tier: keys with a request fingerprint or a result,
	// found by their fingerprint (see table). Complete updates an entry in
	// place, without writing the index.
	t     table
	bytes atomic.Int64 // fingerprint and result bytes of t's entries, for WithMaxBytes; written under mu
	// done is the compact tier: completed keys with an empty result and no
	// request fingerprint, as 96-bit keyed fingerprints with their expiry
	// and fencing token (16 or 17 bytes a record plus the index), in expiry
	// order, dropped from the front as they expire. A key is in t or in
	// done, never both. Created on first use.
	done *compact.Set
	// prefetchDone is done, for lock's call of Prefetch before it takes
	// mu: the one field read without the lock. Set with done, and cleared
	// by Close so that the records can be collected.
	prefetchDone atomic.Pointer[compact.Set]
	// pending holds keys in progress reserved without a request
	// fingerprint, by compact fingerprint and by token; see pendTable. A
	// key is in t, pending or done, never in two.
	pending pendTable
	// doneHead is the expiry of the compact tier's oldest record
	// (math.MaxInt64 if none), kept here so that the check each call makes
	// for expired records reads no cold record.
	doneHead int64
	// forgotten holds the compact-tier keys deleted by [Store.Forget],
	// with their record's expiry: the tier cannot delete a record before
	// it expires, so such a record is ignored until it is dropped. A key
	// in it completes into the map tier. Created on first use.
	forgotten map[compact.FP]int64
	// tokens is the last token handed out in this shard. A key always maps
	// to the same shard, so its tokens strictly increase. It starts at the
	// wall clock's Unix nanoseconds (see newCore). Tokens handed out here
	// are idx modulo numShards (see nextToken).
	tokens uint64
	idx    uint64 // the shard's index in core.shards
	// minExp is a lower bound of the earliest expiry in t and pending (ns
	// since base): while the clock is before it, nothing in the shard has expired and a
	// scan would find nothing. Every write lowers it; a full scan sets it
	// exactly. Read without the lock by reclaim.
	minExp atomic.Int64
	// nextSample is when an insert may next sample the shard for expired
	// entries; it backs off after a sample that found none, so a shard
	// whose earliest entry was released does not cost every insert a
	// sample.
	nextSample int64
	_          [64]byte // keep shards' locks on separate cache lines
}

// New returns an empty store. Options are validated here; a bad one returns
// an error wrapping idem.ErrInvalidOption. The store starts no goroutine:
// expired keys are removed when they are next touched, by a bounded sample
// on each insert, when the store is full, and by [Store.Sweep].
func New(opts ...Option) (*Store, error) {
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	// SipHash for every key, not compact.NewHasher's AES path for UUIDs:
	// measured in BenchmarkCompact (2026-12-01), the AES path cost 70-120
	// ns more CPU a key here (it allocates a 16-byte block a call, and the
	// collections that garbage brings), where SipHash costs about 70 ns.
	return &Store{c: newCore(cfg, compact.NewSipHasher(compact.NewKey())), prefix: scopePrefix(keystore.DefaultScope)}, nil
}

// configure applies opts to the defaults.
func configure(opts []Option) (config, error) {
	cfg := config{maxKeys: DefaultMaxKeys, maxResult: keystore.DefaultMaxResultSize, clock: time.Now}
	err := option.Apply("memstore", &cfg, opts)
	return cfg, err
}

// newCore returns an empty core fingerprinting keys under fpKey. Each
// shard's tokens start after the wall clock's Unix nanoseconds and step by
// numShards (see nextToken): a shard hands out far fewer than one token
// each 64 ns (its lock alone is held longer than that by each call), so
// its tokens stay at or below the wall clock, and a store started later (after a crash, with
// or without a snapshot) hands out larger ones than any before it, as long
// as the wall clock has not been set back past them.
func newCore(cfg config, fpKey *compact.Hasher) *core {
	c := &core{fpKey: fpKey, clock: cfg.clock, mono: !cfg.clockSet, maxKeys: int64(cfg.maxKeys), maxResult: cfg.maxResult, maxBytes: cfg.maxBytes}
	if cfg.capacity > 0 {
		per := float64(cfg.capacity) / numShards
		c.doneReserve = int(per + 3*math.Sqrt(per) + 1)
	}
	c.base = c.clock()
	start := uint64(max(c.base.UnixNano(), 0))
	for i := range c.shards {
		c.shards[i].t = newTable()
		c.shards[i].idx = uint64(i)
		c.shards[i].doneHead = math.MaxInt64
		c.shards[i].minExp.Store(math.MaxInt64)
		c.shards[i].tokens = start
		if c.doneReserve > 0 {
			c.shards[i].newDone(c)
		}
	}
	return c
}

// scopePrefix is the scope's length byte and name, so keys of different
// scopes never collide whatever bytes they hold. The default scope, the
// common case, is the single byte 0, which no named scope starts with.
func scopePrefix(scope string) string {
	if scope == keystore.DefaultScope {
		return "\x00"
	}
	return string([]byte{byte(len(scope))}) + scope
}

// Scope returns a view of the same store (same memory, same key limit) in
// which keys live in the scope name. It implements [keystore.Scoper].
func (s *Store) Scope(name string) (keystore.Store, error) {
	if err := keystore.ValidateScope(name); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	return &Store{c: s.c, prefix: scopePrefix(name)}, nil
}

// Len returns the number of keys held, including expired keys that have not
// been reclaimed yet.
func (s *Store) Len() int { return int(s.c.count.Load()) }

// MaxResultSize returns the largest result Complete accepts.
func (s *Store) MaxResultSize() int { return s.c.maxResult }

// Close drops every key and makes later calls return idem.ErrClosed.
// It closes every scoped view of the store too. Close is idempotent.
func (s *Store) Close() error {
	if s.c.closed.Swap(true) {
		return nil
	}
	for i := range s.c.shards {
		sh := &s.c.shards[i]
		sh.mu.Lock()
		sh.t, sh.done, sh.pending, sh.forgotten = table{}, nil, pendTable{}, nil
		sh.prefetchDone.Store(nil)
		sh.mu.Unlock()
	}
	s.c.count.Store(0)
	s.c.watch.SignalAll() // waiters reserve again and learn of the close
	return nil
}

// now returns the store's clock as nanoseconds since base. With time.Now
// this uses the monotonic clock, so wall-clock jumps do not move leases;
// time.Since reads only that clock, not the wall clock too (one vDSO call
// instead of two, about half the cost of time.Now).
func (c *core) now() int64 {
	if c.mono {
		return int64(time.Since(c.base))
	}
	return int64(c.clock().Sub(c.base))
}

func (c *core) at(ns int64) time.Time { return c.base.Add(time.Duration(ns)) }

// lock returns the error of check (the call's argument check) or ctx's,
// or locks the shard of key and returns it with the key's fingerprint. op
// names the call in errors. On an error (bad argument, ctx ended, store
// closed) nothing is left locked.
//
// A key of a valid length is hashed before check runs: the compact tier's
// index group for it is then prefetched first, and its cache miss
// overlaps the check, the lock and what the caller does before its lookup.
func (s *Store) lock(ctx context.Context, op, key string, check func() error) (*shard, compact.FP, error) {
	if len(key) > idem.MaxKeyLen {
		if err := check(); err != nil {
			return nil, compact.FP{}, err // not hashed: too long to be a key
		}
	}
	kfp := s.c.fpKey.Sum(s.prefix, key)
	sh := s.c.shard(kfp)
	if d := sh.prefetchDone.Load(); d != nil {
		d.Prefetch(kfp)
	}
	if err := check(); err != nil {
		return nil, compact.FP{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, compact.FP{}, fmt.Errorf("memstore: %s: %w", op, err)
	}
	sh.mu.Lock()
	if sh.t.closed() {
		sh.mu.Unlock()
		return nil, compact.FP{}, fmt.Errorf("memstore: %s: %w", op, idem.ErrClosed)
	}
	return sh, kfp, nil
}

// lockToken locks the shard that handed out cl.Token and returns it with
// the slot of cl's pending claim there, if that shard holds a pending
// claim with cl's token, key and scope: the claim Reserve returned, still
// current. Otherwise (ctx ended, store closed, no such claim) it returns
// j -1 with nothing locked, and the caller takes the path by fingerprint,
// which reports any error. The key is not validated: it is only compared
// with one that was.
func (s *Store) lockToken(ctx context.Context, cl *keystore.Claim) (sh *shard, j int) {
	if ctx.Err() != nil {
		return nil, -1
	}
	sh = s.c.tokenShard(cl.Token)
	sh.mu.Lock()
	if j = sh.pending.byToken(cl.Token); j >= 0 && !sh.t.closed() {
		if p := &sh.pending.slots[j]; p.key == cl.Key && p.prefix == s.prefix {
			return sh, j
		}
	}
	sh.mu.Unlock()
	return nil, -1
}

// shard returns the shard of the key with fingerprint fp: its low 6 bits,
// which the compact index does not use to place it (it uses the low 64 bits'
// halves and the top byte).
func (c *core) shard(fp compact.FP) *shard { return &c.shards[fp.Hi%numShards] }

// nextToken returns the shard's next fencing token: the least one above
// the last that is the shard's index modulo numShards, so that a token
// names the shard it came from and Complete and Release can find a
// pending claim by its token without hashing its key (see pendTable).
// Called with the shard locked.
func (sh *shard) nextToken() uint64 {
	t := sh.tokens + 1
	t += (sh.idx - t) % numShards
	sh.tokens = t
	return t
}

// aux is the compact tier's record of token: token/numShards, which for
// the shard's own tokens (see nextToken) runs one apart from key to key
// as the tier stores best (a byte a record), with token%numShards XOR the
// shard's index in the top 6 bits, so that any token (one restored from
// an older snapshot) is kept exactly. token inverts it.
func (sh *shard) aux(token uint64) uint64 {
	return token/numShards | (token%numShards^sh.idx)<<58
}

// token is the fencing token whose compact-tier record is aux.
func (sh *shard) token(aux uint64) uint64 {
	return (aux&(1<<58-1))*numShards | (aux>>58 ^ sh.idx)
}

// tokenShard returns the shard that handed out token, if this store did.
func (c *core) tokenShard(token uint64) *shard { return &c.shards[token%numShards] }

// add stores e, whose key must be absent from the map tier, and returns
// its slot. Called with the shard locked.
func (sh *shard) add(e entry) uint32 {
	sh.bytes.Add(int64(e.size()))
	return sh.t.add(e)
}

// remove deletes the map-tier entry in slot i. Called with the shard
// locked.
func (sh *shard) remove(i uint32) {
	sh.bytes.Add(-int64(sh.t.at(i).size()))
	sh.t.remove(i)
}

// set replaces the entry in slot i with e, an entry of the same key.
// Called with the shard locked.
func (sh *shard) set(i uint32, e entry) {
	p := sh.t.at(i)
	sh.bytes.Add(int64(e.size() - p.size()))
	*p = e
}

// heldBytes is the bytes of results and fingerprints held, all shards.
func (c *core) heldBytes() int64 {
	var n int64
	for i := range c.shards {
		n += c.shards[i].bytes.Load()
	}
	return n
}

// dropDone drops the compact tier's expired keys. Called with the shard
// locked.
func (sh *shard) dropDone(c *core, now int64) {
	if sh.done != nil && sh.done.Len() > 0 {
		if n := sh.dropThrough(now); n > 0 {
			c.count.Add(int64(-n))
		}
	}
}

// dropThrough drops the compact tier's keys expired at now, forgotten ones
// included, and returns how many. Called with the shard locked.
func (sh *shard) dropThrough(now int64) int {
	if now < sh.doneHead {
		return 0 // nothing expired: the oldest record is not read
	}
	n := sh.done.DropThrough(now)
	sh.doneHead = math.MaxInt64
	if t, ok := sh.done.Oldest(); ok {
		sh.doneHead = t
	}
	if n > 0 && len(sh.forgotten) > 0 {
		for fp, exp := range sh.forgotten {
			if exp <= now {
				delete(sh.forgotten, fp)
			}
		}
	}
	return n
}

// findDone looks the key with compact fingerprint fp up in the compact
// tier, after dropping the expired keys, so a key found there is live.
// Called with the shard locked.
func (sh *shard) findDone(c *core, fp compact.FP, now int64) (compact.Rec, bool) {
	if sh.done == nil || sh.done.Len() == 0 {
		return compact.Rec{}, false
	}
	sh.dropDone(c, now)
	r, ok := sh.done.Find(fp)
	if _, gone := sh.forgotten[fp]; ok && gone {
		return compact.Rec{}, false
	}
	return r, ok
}

// completeDone moves the in-progress entry e of the key with fingerprint
// fp, in slot i, into the compact tier as completed with expiry exp, if it
// fits there (see appendDone). It reports whether it did. Called with the
// shard locked.
func (s *Store) completeDone(sh *shard, fp compact.FP, i uint32, e *entry, exp int64) bool {
	if !s.appendDone(sh, fp, e.token, exp) {
		return false
	}
	sh.remove(i)
	return true
}

// appendDone adds the key with compact fingerprint fp to the compact tier
// as completed with token and expiry exp, if it fits there: an expiry not
// before the tier's newest (the tier expires in order). It reports whether
// it did. Called with the shard locked.
func (s *Store) appendDone(sh *shard, fp compact.FP, token uint64, exp int64) bool {
	if _, gone := sh.forgotten[fp]; gone {
		return false // its forgotten record is still in the tier
	}
	if sh.done == nil {
		sh.newDone(s.c)
	}
	if last, ok := sh.done.Newest(); ok && exp < last {
		return false
	}
	r := compact.Rec{T: exp, Seq: sh.done.NextSeq(), Aux: sh.aux(token)}
	if sh.done.Append(fp, r) != nil {
		return false
	}
	sh.doneHead = min(sh.doneHead, exp)
	sh.lower(exp)
	return true
}

// doneGrowth is the factor by which a shard's compact tier grows its
// index, and doneStep the records a growth moves per Append. Each shard's
// sizes are offset by its own fraction of a step (see
// compact.Set.SetGrowth), so the 64 shards' indexes grow one after another
// and together hold the average of a step, 7.0 bytes a key at 1.5, where
// one index at the default factor (1.35) peaks at 7.8; with two moves a
// record instead of 2.9. A growth holds the old index (5.8 bytes a key of
// its shard) for 1/(doneStep·0.5) of the shard's fill: at 128 (a Complete
// that moves them takes about 4.5 µs more, as long as Go's map takes to
// split a table) 0.1 bytes a key across the store, against 0.3 to 0.5 at
// the default 32 (measured at 3M and 10M keys, 2026-12-01).
const (
	doneGrowth = 1.5
	doneStep   = 128
)

// newDone gives the shard of c an empty compact tier, sized for
// c.doneReserve keys if WithCapacity asked. Called with the shard locked
// (or not yet shared).
func (sh *shard) newDone(c *core) {
	s := compact.NewSetAux()
	s.SetGrowth(doneGrowth, float64(sh.idx)/numShards, doneStep)
	s.Reserve(c.doneReserve)
	sh.done = s
	sh.prefetchDone.Store(s)
}
