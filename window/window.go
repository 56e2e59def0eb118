package window

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/compact"
	"github.com/idem-go/idem/internal/option"
)

var (
	// ErrFull is returned by Add when the Dedup holds WithMaxEntries live ids
	// and a new id arrives. The id is not recorded; nothing is evicted. The
	// caller should fail closed: not process the message, not acknowledge it,
	// and let it be redelivered once ids have expired.
	ErrFull = errors.New("window: full: every slot holds an id still inside the window")

	// ErrTooLong is returned by Add when scope and id together exceed
	// MaxKeyLen bytes. Nothing is recorded.
	ErrTooLong = errors.New("window: scope and id are too long")
)

// MaxKeyLen is the longest scope plus id, in bytes, a Dedup records.
// JetStream message ids and SQS deduplication ids (at most 128 characters)
// are far shorter.
const MaxKeyLen = 64 << 10

// Option configures New.
type Option func(*config) error

type config struct {
	max, capacity int
}

// WithMaxEntries bounds the live ids to n (n > 0). When the bound is reached,
// Add refuses new ids with ErrFull rather than evicting ids whose window is
// still open, which would let their duplicates through. Without it the
// number of live ids is bounded only by arrival rate × window.
func WithMaxEntries(n int) Option {
	return option.Check("window", n > 0, func(c *config) { c.max = n }, "max entries %d must be positive", n)
}

// WithCapacity sizes the Dedup's index for n live ids (n > 0) from the
// start, as a size hint to make(map, n) does: a Dedup that holds up to n
// ids then never grows its index (no ids moved, no second index while
// they move, no pauses), and filling it costs what its steady state does.
// The index, 5.8 bytes an id of n, is held from New on whatever the live
// count, and is not shrunk below it when ids expire; records (16 bytes an
// id) are still allocated as ids arrive. Past n the index grows as without
// the hint. Size it from the rate and the window: rate × window ids.
func WithCapacity(n int) Option {
	return option.Check("window", n > 0, func(c *config) { c.capacity = n }, "capacity %d must be positive", n)
}

// Dedup remembers message ids for a fixed window after their first accept,
// as NATS JetStream and SQS FIFO do, and reports later arrivals of the same
// id in the same scope as duplicates. It is safe for concurrent use; one
// mutex guards it, held for one index probe and an append per call, with
// fingerprinting done outside it (but for the one AES block of a UUID
// id's, encrypted in a buffer the mutex guards so that it is not
// allocated).
//
// Each live id costs 16 bytes of record (its 96-bit fingerprint and a
// 4-byte time offset, in arrival order; the sequence is implied by the
// position) plus an index slot of 5⅓ bytes at a load of 0.68 to 0.92: 21.8
// to 24 bytes an id whatever the length of scope and id, in structures
// without pointers for the garbage collector to trace. Expired ids are
// dropped from the front of the arrival-ordered ring at the start of each
// call, one index deletion each (amortised O(1)), so no call scans the
// whole set. The index grows incrementally: the call that takes it past
// its load limit allocates one sized for the ids at load 0.68, each later
// Add moves 32 ids into it (about 1 µs) while lookups probe both,
// so no Add pays for the whole set (before, one call rebuilt a 10M-id
// index in about 0.3 s). While both indexes exist an id costs up to 5.8 bytes more (29.7
// at the start of a growth), for about a tenth of the time a filling
// Dedup spends growing. Shrinking after a burst has expired is still one
// rebuild of the ids left, in the call that drops the load under 0.25.
type Dedup struct {
	w        int64 // window, nanoseconds
	max      int
	capacity int                            // WithCapacity
	key      atomic.Pointer[compact.Hasher] // replaced only by a restore

	mu      sync.Mutex
	block   [16]byte // the AES block of a UUID id's fingerprint, under mu
	latest  int64    // the latest now seen, Unix nanoseconds
	nextSeq uint64   // the next accepted id's sequence
	set     *compact.Set
}

// New returns a Dedup with window w (w > 0): an id is a duplicate while less
// than w has passed since its first accept.
func New(w time.Duration, opts ...Option) (*Dedup, error) {
	if w <= 0 {
		return nil, fmt.Errorf("window: window %v must be positive: %w", w, idem.ErrInvalidOption)
	}
	var c config
	if err := option.Apply("window", &c, opts); err != nil {
		return nil, err
	}
	d := &Dedup{w: int64(w), max: c.max, capacity: c.capacity, nextSeq: 1, set: compact.NewSet()}
	d.set.Reserve(c.capacity)
	d.key.Store(compact.NewHasher(compact.NewKey()))
	return d, nil
}

// Seen reports whether id was first accepted in scope less than the window
// ago, and records it if not.
//
// A duplicate is reported as (true, original) and changes nothing: in
// particular it does not extend the window, which stays anchored at the
// first accept. An id resent every minute under a 2-minute window is a
// duplicate at minute 1 and new again at minute 2. A new id is recorded and
// reported as (false, seq), seq being the sequence it was given; exactly at
// first accept + window the id is new again (duplicate iff now − first < w).
// Sequences are global to the Dedup (not per scope), start at 1 and increase
// by one per accepted id, like a stream sequence in JetStream.
//
// Scopes are independent: the same id in two scopes is two ids. Use the
// stream or queue name as the scope, or queue plus message group for SQS
// FIFO's per-group deduplication.
//
// Ids are compared by a keyed 96-bit fingerprint, not byte for byte: see
// the package documentation for the bound on false duplicates.
//
// Time: the window is measured on now's wall clock reading (UnixNano). A now
// earlier than the latest now passed to any call is treated as that latest
// now: the clock never runs backwards inside a Dedup, so a clock step back
// can neither revive expired ids nor extend a window, and arrival order stays
// time order.
//
// If the Dedup was built WithMaxEntries and is full, or scope and id exceed
// MaxKeyLen, the id is not recorded and Seen returns (false, 0); 0 is never a
// valid sequence. Use Add to get the reason as an error.
//
// The ids live in memory only, unless saved with [Dedup.SaveSnapshot] and
// loaded after a restart with [Dedup.LoadSnapshot].
func (d *Dedup) Seen(scope, id string, now time.Time) (dup bool, original uint64) {
	dup, original, _ = d.Add(scope, id, now)
	return dup, original
}

// Add is Seen with errors: it returns ErrFull when the Dedup was built
// WithMaxEntries and every slot holds a live id, and ErrTooLong when scope
// and id exceed MaxKeyLen. In both cases nothing is recorded and original is
// 0. A duplicate is never an error, even when the Dedup is full.
func (d *Dedup) Add(scope, id string, now time.Time) (dup bool, original uint64, err error) {
	if err := tooLong(scope, id); err != nil {
		return false, 0, err
	}
	k := d.key.Load()
	fp, u, isUUID := prehash(k, scope, id)
	nowNs := now.UnixNano()

	d.mu.Lock()
	defer d.mu.Unlock()
	if k2 := d.key.Load(); k2 != k { // a restore changed the key meanwhile
		k = k2
		fp, u, isUUID = prehash(k, scope, id)
	}
	if isUUID {
		// The AES block is a field: encrypting in a local buffer would
		// allocate it (it escapes through the cipher.Block interface).
		fp = k.SumUUID(scope, &u, &d.block)
	}
	d.advance(nowNs)
	return d.insert(fp)
}

// prehash returns id's fingerprint under k, or, for an id that takes k's
// UUID path, its 16 bytes (isUUID), whose fingerprint the caller computes
// with k.SumUUID under d.mu.
func prehash(k *compact.Hasher, scope, id string) (fp compact.FP, u [16]byte, isUUID bool) {
	if k.UUIDPath() {
		if u, ok := compact.ParseUUID(id); ok {
			return fp, u, true
		}
	}
	return k.Sum(scope, id), u, false
}

// Result is one id's answer from [Dedup.AddBatch]: what [Dedup.Add] would
// have returned for it.
type Result struct {
	Dup      bool
	Original uint64 // the original's sequence if Dup, else the id's own; 0 on error
	Err      error  // ErrFull or ErrTooLong; nothing was recorded
}

// AddBatch is Add for each of ids in order, in scope, all at now, with
// one Result per id appended to out (pass out[:0] to reuse its memory)
// and returned. An id repeated within the batch is a duplicate of its
// first occurrence. Each group of up to 16 ids is fingerprinted before the
// lock is taken and then answered under one lock, after loading all their
// index groups at once (compact.Set.Touch), so their cache misses overlap
// instead of costing one after another: where a consumer receives
// messages in batches (a JetStream fetch, an SQS receive of 10), this is
// the faster call.
func (d *Dedup) AddBatch(scope string, ids []string, now time.Time, out []Result) []Result {
	nowNs := now.UnixNano()
	var fps [compact.TouchBatch]compact.FP
	var buf *[16]byte // the AES block of UUID ids: one allocation a call
	if len(ids) > 0 {
		buf = new([16]byte)
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), len(fps))]
		ids = ids[len(batch):]
		k := d.key.Load()
		sum := func(k *compact.Hasher) {
			for i, id := range batch {
				if tooLong(scope, id) == nil {
					fps[i] = k.SumBuf(scope, id, buf)
				}
			}
		}
		sum(k)
		d.mu.Lock()
		if k2 := d.key.Load(); k2 != k { // a restore changed the key meanwhile
			sum(k2)
		}
		d.advance(nowNs)
		d.set.Touch(fps[:len(batch)])
		for i, id := range batch {
			var r Result
			if r.Err = tooLong(scope, id); r.Err == nil {
				r.Dup, r.Original, r.Err = d.insert(fps[i])
			}
			out = append(out, r)
		}
		d.mu.Unlock()
	}
	return out
}

func tooLong(scope, id string) error {
	if len(scope)+len(id) > MaxKeyLen {
		return fmt.Errorf("window: %d bytes, limit %d: %w", len(scope)+len(id), MaxKeyLen, ErrTooLong)
	}
	return nil
}

// insert answers for the id with fingerprint fp at the latest now: its
// original's sequence if it is live, else records it. Called with d.mu
// held, after advance.
func (d *Dedup) insert(fp compact.FP) (dup bool, original uint64, err error) {
	if r, ok := d.set.Find(fp); ok {
		return true, r.Seq, nil
	}
	if d.max > 0 && d.set.Len() >= d.max {
		return false, 0, fmt.Errorf("%w (%d live ids)", ErrFull, d.set.Len())
	}
	if err := d.set.Append(fp, compact.Rec{T: d.latest, Seq: d.nextSeq}); err != nil {
		return false, 0, fmt.Errorf("%w (%d live ids): %w", ErrFull, d.set.Len(), err)
	}
	d.nextSeq++
	return false, d.nextSeq - 1, nil
}

// Expire drops the ids whose window has closed at now (or at the latest now
// seen, if that is later) and reports how many it dropped. Seen and Add do
// this themselves; call Expire to release memory while no ids arrive.
func (d *Dedup) Expire(now time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.advance(now.UnixNano())
}

// Len reports the live ids as of the latest now seen.
func (d *Dedup) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set.Len()
}

// Bytes reports the memory the Dedup holds for its ids: records, index and
// the chunk directory.
func (d *Dedup) Bytes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set.Bytes()
}

// ContentID returns a content-based message id for body, as SQS FIFO
// derives one when content-based deduplication is on: the lower-case hex
// SHA-256 of the body. Two messages with identical bodies get the same id,
// so use it only where identical bodies really are the same message.
func ContentID(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// advance moves the clock to nowNs (never backwards) and drops the ids
// whose window has closed (latest − first ≥ w), oldest first.
func (d *Dedup) advance(nowNs int64) int {
	if nowNs > d.latest {
		d.latest = nowNs
	}
	cut := d.latest - d.w
	if cut > d.latest { // underflow: nothing is that old
		return 0
	}
	return d.set.DropThrough(cut)
}
