package compact

// index maps fingerprints to record ids: an open-addressing table with
// linear probing in Robin Hood order (Celis, 1986) and backward-shift
// deletion, so it never holds tombstones and needs no periodic clean-up.
//
// A slot is 5 bytes, a 4-byte record id and a 1-byte probe distance (0 =
// empty, d = the record sits d-1 slots after its home), grouped 16 to a
// block so that both live in one or two adjacent cache lines. The distance
// is what makes the table cheap to keep without the fingerprints in it:
//
//   - a lookup only reads a record (a cache miss in the ring) for slots
//     whose distance says they share the wanted home, about one per call
//     at the load factors used here;
//   - a lookup of an absent fingerprint stops at the first slot whose
//     distance is shorter than its own probe (Robin Hood's invariant);
//   - insertion and deletion move slots with their distances, never
//     reading a record.
//
// Homes are Lemire's multiply-shift reduction of 32 fingerprint bits, so
// the table can have any number of slots (a multiple of 16), not just a
// power of two: its size follows the live ids in steps of about 1.4×,
// keeping the load between minLoad and maxLoad.
type index struct {
	blocks []block
	m      uint64 // slots: 16 × len(blocks)
	n      int    // occupied slots
}

type block struct {
	dist [blockLen]uint8
	ids  [blockLen]uint32
}

const (
	blockLen = 16
	// The table grows when an insert would take the load past maxLoad,
	// and is rebuilt smaller when deletions take it under shrinkLoad; a
	// rebuild targets targetLoad. Robin Hood probing keeps probes short at
	// these loads (mean distance about 2 at 0.92).
	maxLoadPct    = 92
	targetLoadPct = 66
	shrinkLoadPct = 25
	minSlots      = 4 * blockLen
	// maxDist is the longest probe a slot can record; an insert that would
	// need a longer one grows the table instead.
	maxDist = 255
)

func newIndex(slots uint64) index {
	nb := max((slots+blockLen-1)/blockLen, minSlots/blockLen)
	return index{blocks: make([]block, nb), m: nb * blockLen}
}

// slotsFor returns the table size that holds n at targetLoad.
func slotsFor(n int) uint64 {
	return max(uint64(n)*100/targetLoadPct+1, minSlots)
}

func (x *index) home(h uint32) uint64 { return (uint64(h) * x.m) >> 32 }

func (x *index) at(i uint64) (*uint8, *uint32) {
	b := &x.blocks[i/blockLen]
	return &b.dist[i%blockLen], &b.ids[i%blockLen]
}

func (x *index) next(i uint64) uint64 {
	if i++; i == x.m {
		return 0
	}
	return i
}

// insert adds id, whose home bits are h and which is not in the table. It
// reports false, leaving the table unusable until rebuilt, if a probe
// distance would exceed maxDist.
func (x *index) insert(h uint32, id uint32) bool {
	i := x.home(h)
	for d := uint8(1); ; d++ {
		if pd, _ := x.at(i); *pd < d {
			return x.place(i, d, id)
		}
		if d == maxDist {
			return false
		}
		i = x.next(i)
	}
}

// place inserts id starting the probe at slot i with
// distance d (as left by a failed lookup). It reports false, leaving the
// table unusable until rebuilt, if a distance would exceed maxDist.
func (x *index) place(i uint64, d uint8, id uint32) bool {
	for {
		pd, pid := x.at(i)
		if *pd == 0 {
			*pd, *pid = d, id
			x.n++
			return true
		}
		if *pd < d {
			*pd, d = d, *pd
			*pid, id = id, *pid
		}
		if d == maxDist {
			return false
		}
		d++
		i = x.next(i)
	}
}

// remove deletes the slot holding id, whose home is h, and shifts the
// slots after it back by one until one is empty or at its home. It
// reports false if id is not in the table.
func (x *index) remove(h uint32, id uint32) bool {
	i := x.home(h)
	for d := uint8(1); ; d++ {
		pd, pid := x.at(i)
		if *pd < d {
			return false
		}
		if *pd == d && *pid == id {
			break
		}
		if d == maxDist {
			return false
		}
		i = x.next(i)
	}
	for {
		j := x.next(i)
		nd, nid := x.at(j)
		pd, pid := x.at(i)
		if *nd <= 1 {
			*pd, *pid = 0, 0
			x.n--
			return true
		}
		*pd, *pid = *nd-1, *nid
		i = j
	}
}

// bytes reports the memory the table holds.
func (x *index) bytes() int { return len(x.blocks) * (blockLen * 5) }
