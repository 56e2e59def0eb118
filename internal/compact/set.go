package compact

import (
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"unsafe"
)

// ErrFull is returned by [Set.Append] when the set cannot number another
// record: its live records span MaxRecords record ids.
var ErrFull = errors.New("compact: full")

const (
	chunkBits = 10
	chunkLen  = 1 << chunkBits // records per chunk: 16 KiB
	// idChunkBits is how many bits of a record id number its chunk.
	idChunkBits = 32 - chunkBits
	chunkMask   = 1<<idChunkBits - 1

	// MaxRecords bounds the records a Set holds at once: half the 32-bit
	// record id space, so that ids of live records never wrap onto each
	// other even when chunks are closed early.
	MaxRecords = 1 << 31
)

// rec is one record: a 96-bit fingerprint and its time as an offset from
// its chunk's base time. 16 bytes, no pointers.
type rec struct {
	lo  uint64
	hi  uint32
	off uint32
}

// chunk holds up to chunkLen records appended in order. Its records have
// consecutive sequence numbers from seq and times base+off, base being the
// latest rebase at or before the record (a record more than 2³² ns after
// the current base adds a rebase, so sparse arrivals cost 12 bytes a
// rebase rather than a chunk each); a record whose sequence would not fit
// starts a new chunk. Aux values (Sets made with NewSetAux) are kept the
// same way, as auxBase + index: nothing a record while the values run
// exactly one apart (a shard's fencing tokens, completed in the order they
// were handed out), an aux rebase for each of the first sparseAuxes that
// do not, and then a signed byte of skew a record (a rebase when the skew
// does not fit): at most 1 byte a record while the values run about one
// apart. The record arrays hold no pointers, so they cost the garbage
// collector nothing to scan.
type chunk struct {
	base    int64
	seq     uint64
	n       int
	recs    *[chunkLen]rec  // exactly 16 KiB, a Go size class: no rounding waste
	skew    *[chunkLen]int8 // Sets made with NewSetAux, once sparseAuxes rebases do not do
	rebases []rebase
	auxes   []auxRebase // Sets made with NewSetAux; the first at index 0
}

type auxRebase struct {
	from int
	base uint64 // aux of record i is base + i + skew[i] (0 without skew)
}

// sparseAuxes is how many aux rebases a chunk takes before it allocates
// its skew array: a chunk whose values run exactly one apart (a shard's
// tokens completed in the order they were handed out) needs none, and a
// few values out of order cost 16 bytes a rebase, below the array's 1 KiB.
const sparseAuxes = 16

type rebase struct {
	from int // first record of the chunk using base
	base int64
}

// Rec is what a Set keeps with a fingerprint.
type Rec struct {
	T   int64  // time, nondecreasing in arrival order
	Seq uint64 // sequence: consecutive within a chunk, as Append was given
	Aux uint64 // Sets made with NewSetAux: any value (a fencing token)
}

// time returns the time of record i.
func (c *chunk) time(i int) int64 {
	base := c.base
	if len(c.rebases) > 0 {
		// The last rebase at or before i: rebases are in record order.
		k := sort.Search(len(c.rebases), func(k int) bool { return c.rebases[k].from > i })
		if k > 0 {
			base = c.rebases[k-1].base
		}
	}
	return base + int64(c.recs[i].off)
}

// appendAux keeps aux as record i's value: implied by the last aux rebase
// if it continues it, else by a new rebase while the chunk has fewer than
// sparseAuxes, else as skew in the chunk's skew array (allocated then,
// zero for the records before), or a rebase if the skew does not fit a
// byte.
func (c *chunk) appendAux(i int, aux uint64) {
	d := int64(aux - c.auxes[len(c.auxes)-1].base - uint64(i))
	switch {
	case d == 0:
	case c.skew == nil && len(c.auxes) < sparseAuxes:
		c.auxes = append(c.auxes, auxRebase{from: i, base: aux - uint64(i)})
	default:
		if c.skew == nil {
			c.skew = new([chunkLen]int8)
		}
		if d < -128 || d > 127 {
			c.auxes = append(c.auxes, auxRebase{from: i, base: aux - uint64(i)})
			d = 0
		}
		c.skew[i] = int8(d)
	}
}

func (c *chunk) lastBase() int64 {
	if k := len(c.rebases); k > 0 {
		return c.rebases[k-1].base
	}
	return c.base
}

func (c *chunk) get(i int) Rec {
	r := Rec{T: c.time(i), Seq: c.seq + uint64(i)}
	if len(c.auxes) > 0 {
		k := sort.Search(len(c.auxes), func(k int) bool { return c.auxes[k].from > i }) - 1
		r.Aux = c.auxes[k].base + uint64(i)
		if c.skew != nil {
			r.Aux += uint64(int64(c.skew[i]))
		}
	}
	return r
}

// Set is an arrival-ordered set of fingerprints with a time and a sequence
// number each: a ring of fixed-size records in 16 KiB chunks (16 bytes a
// record) and an index of record ids (5⅓ bytes a slot, see index). Records
// are appended in nondecreasing time and dropped oldest first, a chunk at a
// time, so memory follows the live records and no call scans them.
//
// A Set is not safe for concurrent use; its owner locks.
type Set struct {
	chunks []chunk // oldest first; chunks[i] is chunk number first+i
	first  uint32  // chunk number of chunks[0], modulo 1<<idChunkBits
	head   int     // index in chunks[0] of the oldest record
	count  int
	newest int64          // the newest record's time, while count > 0
	spare  *[chunkLen]rec // one released chunk's records, kept for reuse
	hasAux bool
	idx    index
	// grow is the index being migrated into idx while it grows, and the
	// records not yet moved; see grow.go.
	grow growth
	// syncBelow is the record count under which the index grows in one
	// rebuild rather than incrementally; tests lower it.
	syncBelow int
	// size is the index's schedule of sizes.
	size sizing
	// floor is the least number of groups the index keeps (Reserve).
	floor uint64
	// homeMask is applied to the 32 fingerprint bits that choose a home
	// slot; tests narrow it to force long probe chains.
	homeMask uint32
	// hint is the index as Prefetch, which takes no lock, sees it; see
	// prefetch.go.
	hint atomic.Pointer[probeHint]
}

// NewSet returns an empty set: 16 bytes a record plus the index.
func NewSet() *Set {
	s := &Set{idx: newIndex(minGroups), size: defaultSizing, homeMask: ^uint32(0), syncBelow: syncGrowBelow, grow: growth{step: migrateStep}}
	s.publish()
	return s
}

// SetGrowth sets the empty set's index to grow by factor f (1 < f ≤ 3)
// through sizes offset by phase (0 ≤ phase < 1) steps, moving step records
// (step ≥ 1) into a growing index per Append; see sizing and grow.go. Sets
// that are used together and fill alike (the shards of one store) should
// take phases spread evenly over [0, 1): their indexes then grow one after
// another instead of at once, and together cost the average of a step. A
// larger step holds the old index for fewer Appends (1/(step·(f−1)) of a
// filling set's, 5.8 bytes a record while it lasts) at the price of a
// longer Append while it does (about 35 ns a record moved).
func (s *Set) SetGrowth(f, phase float64, step int) {
	if !(f > 1 && f <= 3) || !(phase >= 0 && phase < 1) || step < 1 || s.count > 0 {
		panic(fmt.Sprintf("compact: SetGrowth(%v, %v, %d) on a set of %d records", f, phase, step, s.count))
	}
	s.size = sizing{f: f, phase: phase}
	s.grow.step = step
}

// Reserve sizes the index for n records at maxLoad, as a size hint to
// make(map, n) does, so that a set filled to n records never grows it: no
// record moves and no second index. The index never shrinks below that
// size afterwards (5⅓/0.92 = 5.8 bytes a reserved record, held whatever the
// count). A Reserve of no more than the index holds does nothing.
func (s *Set) Reserve(n int) {
	s.floor = max(s.floor, nextPrime(max(groupsAtMax(n), minGroups))) // the size newIndex makes
	if s.floor > s.idx.ng {
		s.rebuild(s.floor)
	}
}

// SizeFor grows the index now, in one rebuild, to the size a rebuild of n
// records takes (load maxLoad/f), if it is smaller: a set about to be
// filled with n records (a snapshot's) then does not grow step by step,
// and is not full when they are in. Unlike Reserve it keeps no floor: the
// index shrinks as usual once records are dropped.
func (s *Set) SizeFor(n int) {
	if g := s.size.groups(n); g > s.idx.ng {
		s.rebuild(g)
	}
}

// groupsAtMax is the size that holds n records at maxLoad.
func groupsAtMax(n int) uint64 { return uint64(max(n, 0))*100/(maxLoadPct*groupLen) + 1 }

// NewSetAux returns an empty set that also keeps Rec.Aux: 16 bytes a
// record plus the index while aux values run exactly one apart, at most 17
// while they run about one apart (see chunk).
func NewSetAux() *Set {
	s := NewSet()
	s.hasAux = true
	return s
}

// Len returns the number of records.
func (s *Set) Len() int { return s.count }

func (s *Set) homeBits(fp FP) uint32 { return uint32(fp.Lo>>32) & s.homeMask }

// stepBits are the 32 fingerprint bits that choose the probe step.
func stepBits(fp FP) uint32 { return uint32(fp.Lo) }

func (s *Set) rec(id uint32) (*chunk, *rec) {
	c := &s.chunks[(id>>chunkBits-s.first)&chunkMask]
	return c, &c.recs[id&(chunkLen-1)]
}

func (s *Set) id(pos int, i int) uint32 {
	return (s.first+uint32(pos))&chunkMask<<chunkBits | uint32(i)
}

// Find returns the record with fingerprint fp.
func (s *Set) Find(fp FP) (Rec, bool) {
	if r, ok := s.findIn(&s.idx, fp); ok {
		return r, true
	}
	if s.grow.left > 0 {
		// Growing: records not yet moved are only in the old index.
		return s.findIn(&s.grow.old, fp)
	}
	return Rec{}, false
}

// Touch loads the index groups where the fingerprints fps would be found
// (their home groups, in the old index too while it grows) without
// changing anything, so that Finds and Appends of them that follow hit the
// cache: the loads are independent, so the CPU has their cache misses in
// flight at once instead of one after another. Pass a few dozen at most:
// beyond what the cache holds, the first ones are evicted again.
func (s *Set) Touch(fps []FP) {
	var homes [TouchBatch]uint64
	for len(fps) > 0 {
		n := min(len(fps), TouchBatch)
		for i, fp := range fps[:n] {
			homes[i] = s.idx.home(s.homeBits(fp))
		}
		s.idx.touchAll(homes[:n])
		if s.grow.left > 0 {
			for i, fp := range fps[:n] {
				homes[i] = s.grow.old.home(s.homeBits(fp))
			}
			s.grow.old.touchAll(homes[:n])
		}
		fps = fps[n:]
	}
}

// TouchBatch is how many fingerprints [Set.Touch] loads at once: about as
// many cache misses as a core keeps in flight.
const TouchBatch = 16

// findIn looks fp up in x, which is s.idx or the old index of a growth.
func (s *Set) findIn(x *index, fp FP) (Rec, bool) {
	tag := tagOf(fp)
	g, step := x.home(s.homeBits(fp)), x.stride(stepBits(fp))
	for range x.ng {
		gr := &x.groups[g]
		lo, hi := gr.match(tag)
		for m := lo; m != 0; m &= m - 1 {
			if i := trailing(m); gr.tags[i] == tag {
				if r, ok := s.check(gr.ids[i], fp); ok {
					return r, true
				}
			}
		}
		for m := uint64(hi); m != 0; m &= m - 1 {
			if i := 8 + trailing(m); gr.tags[i] == tag {
				if r, ok := s.check(gr.ids[i], fp); ok {
					return r, true
				}
			}
		}
		if gr.over == 0 {
			break
		}
		g = x.next(g, step)
	}
	return Rec{}, false
}

// check returns the record id if it is live and has fingerprint fp. The
// old index of a growth still holds the ids of records dropped since it
// began (they are removed from idx only), so ids are checked against the
// live range before their record is read.
func (s *Set) check(id uint32, fp FP) (Rec, bool) {
	p, i := int((id>>chunkBits-s.first)&chunkMask), int(id&(chunkLen-1))
	if p >= len(s.chunks) || (p == 0 && i < s.head) || i >= s.chunks[p].n {
		return Rec{}, false
	}
	c := &s.chunks[p]
	if r := &c.recs[i]; r.lo != fp.Lo || r.hi != fp.Hi {
		return Rec{}, false
	}
	return c.get(i), true
}

// Append adds a record for fp, which the caller has checked is absent. Its
// time must not be before the newest record's; a sequence that does not
// follow the newest record's starts a new chunk. It returns ErrFull, adding
// nothing, when the set holds MaxRecords records or their ids would wrap.
func (s *Set) Append(fp FP, r Rec) error {
	c := s.tail()
	if c == nil || c.n == chunkLen || r.T < c.lastBase() || r.Seq != c.seq+uint64(c.n) {
		if int64(s.count) >= MaxRecords || len(s.chunks) >= MaxRecords/chunkLen { // int64: MaxRecords exceeds a 32-bit int
			return fmt.Errorf("%w: %d records in %d chunks", ErrFull, s.count, len(s.chunks))
		}
		c = s.newChunk(r)
	} else if r.T-c.lastBase() > 1<<32-1 {
		c.rebases = append(c.rebases, rebase{from: c.n, base: r.T})
	}
	i := c.n
	c.recs[i] = rec{lo: fp.Lo, hi: fp.Hi, off: uint32(r.T - c.lastBase())}
	if s.hasAux {
		c.appendAux(i, r.Aux)
	}
	c.n++
	s.count++
	s.newest = r.T
	id := s.id(len(s.chunks)-1, i)
	if s.idx.full() {
		// A growth still under way when the new index fills (only with a
		// step far below migrateStep) cannot finish into it: rebuild.
		if s.grow.left > 0 {
			s.rebuild(s.size.groups(s.count))
			return nil
		}
		if s.count < s.syncBelow {
			s.rebuild(s.size.after(s.idx.ng))
			return nil
		}
		s.startGrowth()
	}
	s.idx.insert(s.homeBits(fp), stepBits(fp), tagOf(fp), id)
	if s.grow.left > 0 {
		s.migrate(s.grow.step)
	}
	return nil
}

// Newest returns the time of the newest record, without reading it.
func (s *Set) Newest() (t int64, ok bool) {
	if s.count == 0 {
		return 0, false
	}
	return s.newest, true
}

// NextSeq returns the sequence that continues the newest chunk, for
// callers that do not number their records: appending with it never
// starts a chunk early.
func (s *Set) NextSeq() uint64 {
	if c := s.tail(); c != nil {
		return c.seq + uint64(c.n)
	}
	return 0
}

// Oldest returns the time of the oldest record.
func (s *Set) Oldest() (t int64, ok bool) {
	if s.count == 0 {
		return 0, false
	}
	return s.chunks[0].time(s.head), true
}

// DropThrough drops the records whose time is at most t, oldest first, and
// returns how many it dropped. Each costs one index deletion, which reads
// no other record; emptied chunks are released whole.
func (s *Set) DropThrough(t int64) int {
	dropped := 0
	for s.count > 0 {
		c := &s.chunks[0]
		r := &c.recs[s.head]
		if c.time(s.head) > t {
			break
		}
		fp := FP{Lo: r.lo, Hi: r.hi}
		if s.grow.left > 0 && s.grow.p == 0 && s.grow.j == s.head {
			// Not moved yet: it is only in the old index, which is
			// dropped whole when the growth ends.
			s.grow.j++
			s.grow.left--
			if s.grow.left == 0 {
				s.grow.old = index{}
			}
		} else if !s.idx.remove(s.homeBits(fp), stepBits(fp), tagOf(fp), s.id(0, s.head)) {
			panic("compact: index lost a record")
		}
		s.count--
		dropped++
		if s.head++; s.head == c.n && (c.n == chunkLen || len(s.chunks) > 1 || s.count == 0) {
			s.releaseFront()
		}
	}
	if dropped > 0 && s.idx.ng > max(minGroups, s.floor) && s.count*100 < s.idx.slots()*shrinkLoadPct {
		s.rebuild(s.size.groups(s.count))
	}
	return dropped
}

// Each calls fn for every record, oldest first.
func (s *Set) Each(fn func(fp FP, r Rec)) {
	for p := range s.chunks {
		c := &s.chunks[p]
		start := 0
		if p == 0 {
			start = s.head
		}
		for j := start; j < c.n; j++ {
			r := &c.recs[j]
			fn(FP{Lo: r.lo, Hi: r.hi}, c.get(j))
		}
	}
}

// Bytes reports the memory the set holds: chunks (the spare included),
// index and chunk directory.
func (s *Set) Bytes() int {
	n := len(s.chunks)
	if s.spare != nil {
		n++
	}
	b := n*chunkLen*16 + s.idx.bytes() + s.grow.old.bytes() + cap(s.chunks)*int(unsafe.Sizeof(chunk{}))
	for i := range s.chunks {
		b += cap(s.chunks[i].rebases)*int(unsafe.Sizeof(rebase{})) + cap(s.chunks[i].auxes)*int(unsafe.Sizeof(auxRebase{}))
		if s.chunks[i].skew != nil {
			b += chunkLen
		}
	}
	return b
}

func (s *Set) tail() *chunk {
	if len(s.chunks) == 0 {
		return nil
	}
	return &s.chunks[len(s.chunks)-1]
}

func (s *Set) newChunk(r Rec) *chunk {
	recs := s.spare
	if recs != nil {
		s.spare = nil
	} else {
		recs = new([chunkLen]rec)
	}
	if len(s.chunks) == 0 {
		s.head = 0
	}
	c := chunk{base: r.T, seq: r.Seq, recs: recs}
	if s.hasAux {
		c.auxes = []auxRebase{{from: 0, base: r.Aux}}
	}
	s.chunks = append(s.chunks, c)
	return &s.chunks[len(s.chunks)-1]
}

func (s *Set) releaseFront() {
	// A growth's cursor is at or past the head, which has passed this
	// chunk: it moves to the next chunk's start if it was in this one.
	if s.grow.p > 0 {
		s.grow.p--
	} else {
		s.grow.j = 0
	}
	s.spare = s.chunks[0].recs
	s.chunks[0] = chunk{}
	s.chunks = s.chunks[1:]
	s.first = (s.first + 1) & chunkMask
	s.head = 0
}

// rebuild replaces the index with one of the given size holding every
// record, read from the chunks in order. Records go in batches: the first
// pass computes a batch's home groups and touches each (independent loads,
// so the CPU has them all in flight at once instead of one cache miss after
// another), the second inserts them.
func (s *Set) rebuild(groups uint64) {
	x := newIndex(max(groups, s.floor))
	const batch = 32
	var homes [batch]uint64
	for p := range s.chunks {
		c := &s.chunks[p]
		start := 0
		if p == 0 {
			start = s.head
		}
		for j := start; j < c.n; j += batch {
			end := min(j+batch, c.n)
			for k := j; k < end; k++ {
				r := &c.recs[k]
				fp := FP{Lo: r.lo, Hi: r.hi}
				homes[k-j] = x.home(s.homeBits(fp))
			}
			x.touchAll(homes[:end-j])
			for k := j; k < end; k++ {
				r := &c.recs[k]
				fp := FP{Lo: r.lo, Hi: r.hi}
				x.insertAt(homes[k-j], x.stride(stepBits(fp)), tagOf(fp), s.id(p, k))
			}
		}
	}
	s.idx = x
	s.publish()
	s.grow.left, s.grow.old = 0, index{} // every record is in x
}
