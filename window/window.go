package window

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem"
)

var (
	// ErrInvalidOption is wrapped by New's errors. It is idem.ErrInvalidOption.
	ErrInvalidOption = idem.ErrInvalidOption

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
const MaxKeyLen = chunkSize

// Option configures New.
type Option func(*config) error

type config struct {
	max int
}

// WithMaxEntries bounds the live ids to n (n > 0). When the bound is reached,
// Add refuses new ids with ErrFull rather than evicting ids whose window is
// still open, which would let their duplicates through. Without it the
// number of live ids is bounded only by arrival rate × window.
func WithMaxEntries(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("window: %w: max entries %d must be positive", ErrInvalidOption, n)
		}
		c.max = n
		return nil
	}
}

// entry is one live id, kept in arrival order in the ring. Its sequence is
// implied by its position: the oldest entry has sequence Dedup.headSeq.
type entry struct {
	first    int64 // Unix nanoseconds of the first accept
	chunk    uint32
	off      uint32
	scopeLen uint32
	idLen    uint32
}

// scopedID is the key of the rare ids whose 64-bit hash collides with
// another live id's.
type scopedID struct{ scope, id string }

// Dedup remembers message ids for a fixed window after their first accept,
// as NATS JetStream and SQS FIFO do, and reports later arrivals of the same
// id in the same scope as duplicates. It is safe for concurrent use; one
// mutex guards it, held for a map lookup and an append per call, with
// hashing done outside it.
//
// Memory follows the live ids: about 60 bytes each plus len(scope) +
// len(id) (a 24-byte ring slot, a 16-byte index slot at the Go map's load
// factor, and the key bytes; 102 B per 36-character UUID id at 1M ids,
// measured), in structures without pointers for the garbage collector to
// trace. Expired ids are dropped
// from the front of an arrival-ordered ring at the start of each call, so
// no call scans the whole set.
type Dedup struct {
	w    int64 // window, nanoseconds
	max  int
	seed maphash.Seed
	mask uint64 // applied to every hash; tests narrow it to force collisions

	mu       sync.Mutex
	latest   int64             // the latest now seen, Unix nanoseconds
	index    map[uint64]uint64 // key hash -> sequence of the live id with that hash
	overflow map[scopedID]uint64
	peak     int // index size at its largest since it was last rebuilt

	ring    []entry // circular, len a power of two
	head    int     // ring index of the oldest live id
	count   int     // live ids
	headSeq uint64  // sequence of the oldest live id (the next id's, when empty)
	arena   arena
}

// New returns a Dedup with window w (w > 0): an id is a duplicate while less
// than w has passed since its first accept.
func New(w time.Duration, opts ...Option) (*Dedup, error) {
	if w <= 0 {
		return nil, fmt.Errorf("window: %w: window %v must be positive", ErrInvalidOption, w)
	}
	var c config
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("window: %w: nil Option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	return &Dedup{
		w:        int64(w),
		max:      c.max,
		seed:     maphash.MakeSeed(),
		mask:     ^uint64(0),
		index:    make(map[uint64]uint64),
		overflow: make(map[scopedID]uint64),
		ring:     make([]entry, 16),
		headSeq:  1,
	}, nil
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
// The ids live in memory only: after a restart every id is new again.
func (d *Dedup) Seen(scope, id string, now time.Time) (dup bool, original uint64) {
	dup, original, _ = d.Add(scope, id, now)
	return dup, original
}

// Add is Seen with errors: it returns ErrFull when the Dedup was built
// WithMaxEntries and every slot holds a live id, and ErrTooLong when scope
// and id exceed MaxKeyLen. In both cases nothing is recorded and original is
// 0. A duplicate is never an error, even when the Dedup is full.
func (d *Dedup) Add(scope, id string, now time.Time) (dup bool, original uint64, err error) {
	if len(scope)+len(id) > MaxKeyLen {
		return false, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLong, len(scope)+len(id), MaxKeyLen)
	}
	h := d.hashStrings(scope, id)
	nowNs := now.UnixNano()

	d.mu.Lock()
	defer d.mu.Unlock()
	d.advance(nowNs)
	if seq, ok := d.find(h, scope, id); ok {
		return true, seq, nil
	}
	if d.max > 0 && d.count >= d.max {
		return false, 0, fmt.Errorf("%w (%d live ids)", ErrFull, d.count)
	}
	return false, d.insert(h, scope, id), nil
}

// Expire drops the ids whose window has closed at now (or at the latest now
// seen, if that is later) and reports how many it dropped. Seen and Add do
// this themselves; call Expire to release memory while no ids arrive.
func (d *Dedup) Expire(now time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	before := d.count
	d.advance(now.UnixNano())
	return before - d.count
}

// Len reports the live ids as of the latest now seen.
func (d *Dedup) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.count
}

// ContentID returns a content-based message id for body, as SQS FIFO
// derives one when content-based deduplication is on: the lower-case hex
// SHA-256 of the body. Two messages with identical bodies get the same id,
// so use it only where identical bodies really are the same message.
func ContentID(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// keySep separates scope from id in the hashed byte stream. Ambiguous
// splits ("a"+"bc" vs "ab"+"c") could only cause a hash collision, which
// the exact comparison resolves.
const keySep = 0xff

func (d *Dedup) hashStrings(scope, id string) uint64 {
	var h maphash.Hash
	h.SetSeed(d.seed)
	h.WriteString(scope)
	h.WriteByte(keySep)
	h.WriteString(id)
	return h.Sum64() & d.mask
}

func (d *Dedup) hashBytes(scope, id []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(d.seed)
	h.Write(scope)
	h.WriteByte(keySep)
	h.Write(id)
	return h.Sum64() & d.mask
}

func (d *Dedup) at(seq uint64) *entry {
	return &d.ring[(d.head+int(seq-d.headSeq))&(len(d.ring)-1)]
}

func (d *Dedup) equal(e *entry, scope, id string) bool {
	s, i := d.arena.key(e)
	return string(s) == scope && string(i) == id
}

// find returns the sequence of the live id (scope, id) with hash h.
func (d *Dedup) find(h uint64, scope, id string) (uint64, bool) {
	if seq, ok := d.index[h]; ok && d.equal(d.at(seq), scope, id) {
		return seq, true
	}
	if len(d.overflow) > 0 {
		seq, ok := d.overflow[scopedID{scope, id}]
		return seq, ok
	}
	return 0, false
}

func (d *Dedup) insert(h uint64, scope, id string) uint64 {
	if d.count == len(d.ring) {
		d.resize(2 * len(d.ring))
	}
	seq := d.headSeq + uint64(d.count)
	chunk, off := d.arena.add(scope, id)
	d.ring[(d.head+d.count)&(len(d.ring)-1)] = entry{
		first: d.latest, chunk: chunk, off: off,
		scopeLen: uint32(len(scope)), idLen: uint32(len(id)),
	}
	d.count++
	if _, taken := d.index[h]; taken {
		// Another live id has this 64-bit hash: keep this one exactly.
		d.overflow[scopedID{strings.Clone(scope), strings.Clone(id)}] = seq
	} else {
		d.index[h] = seq
		d.peak = max(d.peak, len(d.index))
	}
	return seq
}

// advance moves the clock to nowNs (never backwards) and drops the ids
// whose window has closed, oldest first.
func (d *Dedup) advance(nowNs int64) {
	if nowNs > d.latest {
		d.latest = nowNs
	}
	dropped := false
	for d.count > 0 {
		e := &d.ring[d.head]
		if d.latest-e.first < d.w {
			break
		}
		scope, id := d.arena.key(e)
		h := d.hashBytes(scope, id)
		if seq, ok := d.index[h]; ok && seq == d.headSeq {
			delete(d.index, h)
		} else if len(d.overflow) > 0 {
			delete(d.overflow, scopedID{string(scope), string(id)})
		}
		*e = entry{}
		d.head = (d.head + 1) & (len(d.ring) - 1)
		d.count--
		d.headSeq++
		dropped = true
	}
	if !dropped {
		return
	}
	if d.count == 0 {
		d.arena.releaseAll()
	} else {
		d.arena.releaseBefore(d.ring[d.head].chunk)
	}
	d.shrink()
}

// shrink returns memory after a burst: the ring halves until it is at
// least a quarter full, and the index map (Go maps never shrink) is rebuilt once it holds
// a quarter of its peak.
func (d *Dedup) shrink() {
	n := len(d.ring)
	for n > 1024 && d.count < n/4 {
		n /= 2
	}
	if n != len(d.ring) {
		d.resize(n)
	}
	if d.peak > 4096 && len(d.index) < d.peak/4 {
		m := make(map[uint64]uint64, len(d.index))
		for h, seq := range d.index {
			m[h] = seq
		}
		d.index, d.peak = m, len(m)
	}
}

func (d *Dedup) resize(n int) {
	ring := make([]entry, n)
	for i := range d.count {
		ring[i] = d.ring[(d.head+i)&(len(d.ring)-1)]
	}
	d.ring, d.head = ring, 0
}
