package compact

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// index maps fingerprints to record ids: an open-addressing table of
// 64-byte groups (one cache line each), 12 slots to a group, in the manner
// of folly's F14 tables: a slot is a 4-byte record id and a 1-byte tag (8
// fingerprint bits; 0 = empty), and each group counts the ids whose home
// group is this one or an earlier one on their probe path but which
// overflowed past it. Probing moves to the next group only while that count
// is nonzero, so:
//
//   - a lookup, present or absent, reads one cache line in the common case
//     and a record (a cache miss in the ring) only for slots whose tag
//     matches: the true one, plus 12/256 false ones per group read;
//   - an insertion takes the first empty slot on the path and never moves
//     another slot;
//   - a deletion clears its slot and decrements the overflow counts of the
//     groups it had passed, so the table holds no tombstones and needs no
//     periodic clean-up however many ids come and go.
//
// Homes are Lemire's multiply-shift reduction of 32 fingerprint bits, so
// the table can have any number of groups, not just a power of two: its
// size follows the live ids, keeping the load between targetLoad (after a
// rebuild) and maxLoad.
type index struct {
	groups []group
	ng     uint64 // len(groups)
	n      int    // occupied slots
	touch  uint16 // see Set.rebuild
}

const groupLen = 12

type group struct {
	tags [groupLen]uint8
	over uint16 // ids that probed past this group; saturates
	_    uint16
	ids  [groupLen]uint32
}

const (
	// The table grows when an insert would take the load past maxLoad,
	// and is rebuilt smaller when deletions take it under shrinkLoad; a
	// rebuild targets maxLoad/f (sizing), targetLoad by default. At 5⅓
	// bytes a slot, the index then costs 5.8 to 7.9 bytes a live id by
	// default.
	maxLoadPct    = 92
	targetLoadPct = 68
	shrinkLoadPct = 25
	minGroups     = 5 // a prime, see nextPrime
	groupBytes    = 64
	lsb           = 0x0101010101010101
	msb           = 0x8080808080808080
)

func newIndex(groups uint64) index {
	groups = nextPrime(max(groups, minGroups))
	return index{groups: make([]group, groups), ng: groups}
}

// nextPrime returns the least prime ≥ n (n ≥ 2), so that every probe
// stride in [1, ng) visits every group.
func nextPrime(n uint64) uint64 {
	for ; ; n++ {
		prime := true
		for d := uint64(2); d*d <= n; d++ {
			if n%d == 0 {
				prime = false
				break
			}
		}
		if prime {
			return n
		}
	}
}

// sizing is an index's schedule of sizes: geometric, with factor f
// between consecutive sizes, starting from minGroups·f^phase (phase in
// [0, 1), a fraction of a step). A growth goes from one size to the next,
// so each record moves 1/(f−1) times on average while a set fills, and
// right after it the load is maxLoad/f.
//
// Sets whose sizes are offset by different phases (memstore's shards: see
// Set.SetGrowth) grow at different counts, spread evenly over each step,
// so the bytes their indexes hold together follow the average over a
// step, 5⅓·f·ln f/((f−1)·maxLoad) bytes a record, rather than the peak
// of each step, 5⅓·f/maxLoad: a larger f, with fewer moves, then costs no
// more memory than one set's peak at a smaller f.
type sizing struct {
	f, phase float64
}

// defaultSizing grows by maxLoad/targetLoad: from 0.92 to 0.68.
var defaultSizing = sizing{f: float64(maxLoadPct) / targetLoadPct}

// groups returns the least size of the schedule at which n records fill
// the index to maxLoad/f at most: the size a rebuild of n records takes.
func (z sizing) groups(n int) uint64 {
	need := float64(n) * z.f * 100 / (maxLoadPct * groupLen)
	if need <= minGroups {
		return minGroups
	}
	k := math.Ceil(math.Log(need/minGroups)/math.Log(z.f) - z.phase)
	return uint64(math.Ceil(max(minGroups*math.Pow(z.f, k+z.phase), need)))
}

// after returns the size a growth from ng groups takes: the schedule's
// next one, the least more than half a step above ng. (Computing it from
// the count instead would drift: ng is a size rounded up to a prime, and a
// full index holds just over maxLoad, so that count needs just over the
// next size.)
func (z sizing) after(ng uint64) uint64 {
	k := math.Ceil(math.Log(float64(ng)/minGroups)/math.Log(z.f) - z.phase + 0.5)
	return uint64(math.Ceil(minGroups * math.Pow(z.f, k+z.phase)))
}

func (x *index) slots() int { return int(x.ng) * groupLen }

func (x *index) full() bool { return (x.n+1)*100 > x.slots()*maxLoadPct }

func (x *index) home(h uint32) uint64 { return (uint64(h) * x.ng) >> 32 }

// stride returns the probe step for step bits s: in [1, ng), so with a
// prime number of groups a probe visits every group before repeating.
// Double hashing: ids that share a home group overflow along different
// paths, so a loaded table does not grow long runs of full groups (with a
// step of 1, lookups at 0.9 load read several groups each).
func (x *index) stride(s uint32) uint64 { return 1 + (uint64(s)*(x.ng-1))>>32 }

func (x *index) next(g, step uint64) uint64 {
	if g += step; g >= x.ng {
		return g - x.ng
	}
	return g
}

// tagOf returns the 8 fingerprint bits kept in a slot, never 0.
func tagOf(fp FP) uint8 {
	if t := uint8(fp.Hi >> 24); t != 0 {
		return t
	}
	return 1
}

// match returns two masks, for slots 0-7 and 8-11, with bit 8i+7 set for
// each slot i whose tag may equal t: zero-byte detection on tags XOR t, the
// classic SWAR trick. Callers check each candidate's tag, which filters the
// trick's rare false positives.
func (g *group) match(t uint8) (lo uint64, hi uint32) {
	b := uint64(t) * lsb
	a := binary.LittleEndian.Uint64(g.tags[0:8]) ^ b
	c := uint64(binary.LittleEndian.Uint32(g.tags[8:12])) ^ b
	lo = (a - lsb) & ^a & msb
	hi = uint32((c - lsb) & ^c & msb)
	return lo, hi
}

// free returns the first empty slot of the group, or -1. The lowest byte
// the zero-byte trick flags is always a true zero.
func (g *group) free() int {
	lo, hi := g.match(0)
	if lo != 0 {
		return trailing(lo)
	}
	if hi != 0 {
		return 8 + trailing(uint64(hi))
	}
	return -1
}

// insert adds id, whose home bits are h, step bits sb and tag t, and which
// is not in the table.
func (x *index) insert(h, sb uint32, t uint8, id uint32) {
	x.insertAt(x.home(h), x.stride(sb), t, id)
}

// insertAt is insert given the home group g and probe step.
func (x *index) insertAt(g, step uint64, t uint8, id uint32) {
	for {
		gr := &x.groups[g]
		if i := gr.free(); i >= 0 {
			gr.tags[i], gr.ids[i] = t, id
			x.n++
			return
		}
		if gr.over != ^uint16(0) {
			gr.over++
		}
		g = x.next(g, step)
	}
}

// remove deletes id, whose home bits are h, step bits sb and tag t, and undoes the
// overflow counts its insertion left. It reports false if id is absent.
func (x *index) remove(h, sb uint32, t uint8, id uint32) bool {
	home, step := x.home(h), x.stride(sb)
	g := home
	steps := 0
	for {
		gr := &x.groups[g]
		lo, hi := gr.match(t)
		for m := lo; m != 0; m &= m - 1 {
			if i := trailing(m); gr.tags[i] == t && gr.ids[i] == id {
				return x.clear(gr, i, home, step, steps)
			}
		}
		for m := hi; m != 0; m &= m - 1 {
			if i := 8 + trailing(uint64(m)); gr.tags[i] == t && gr.ids[i] == id {
				return x.clear(gr, i, home, step, steps)
			}
		}
		if gr.over == 0 || steps == int(x.ng) {
			return false
		}
		steps++
		g = x.next(g, step)
	}
}

func (x *index) clear(gr *group, i int, home, step uint64, steps int) bool {
	gr.tags[i], gr.ids[i] = 0, 0
	x.n--
	for g := home; steps > 0; steps-- {
		if p := &x.groups[g]; p.over != ^uint16(0) {
			p.over--
		}
		g = x.next(g, step)
	}
	return true
}

// touchAll loads the groups gs in a loop of a few instructions an
// iteration, so that the CPU has as many of their cache misses in flight
// as it can track (with the loads spread among the computing of homes and
// the reading of records it had about a third as many). The sum is kept
// so the loads are not optimised away.
func (x *index) touchAll(gs []uint64) {
	var t uint16
	for _, g := range gs {
		t += x.groups[g].over
	}
	x.touch += t
}

// trailing returns the slot of the lowest set high bit in a match mask.
func trailing(m uint64) int { return bits.TrailingZeros64(m) >> 3 }

// bytes reports the memory the table holds.
func (x *index) bytes() int { return len(x.groups) * groupBytes }
