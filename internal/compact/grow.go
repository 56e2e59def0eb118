package compact

// Growing the index without a pause.
//
// When an insert would take the index past maxLoad, a Set of syncGrowBelow
// records or more does not rebuild it in that call (at 10M records that
// took about 0.3 s, one call paying for a quarter of a million inserts).
// It allocates the larger index, inserts new records there, and moves the
// records that were indexed before, oldest first, step of them per Append,
// reading them sequentially from the chunks as a rebuild does. Meanwhile a
// lookup that misses the new index also probes the old one, whose ids are
// checked against the live range (records dropped during the growth are
// not removed from it: it is released whole at the end).
//
// The new index is sized for the records at the start at targetLoad, so it
// reaches maxLoad only after 35% more; moving step records per Append
// finishes after at most 1/step as many appends, so with step 32 the old
// index is released before the new one holds 1.03× the records it started
// with. (If it did fill first, the index would be rebuilt in that call.) While
// both exist the index costs 5.8 bytes an id more: a transient peak of
// about 29.7 bytes a record, for the 1/step × 1/0.35 ≈ 9% of the growth
// phase of a filling set that the move lasts.

const (
	syncGrowBelow = 1 << 14 // a rebuild of fewer records takes well under a millisecond
	// migrateStep is one batch of migrate: about 1 µs of moving per Append
	// at 10M records, and a second probe for new ids during 9% of a
	// filling set's appends (with 8: 0.3 µs, and 36% of them).
	migrateStep = 32
)

// growth is an index growth in progress: old holds the records from chunk
// position p (relative to chunks[0]), record j, on, left of them, that are
// not yet in Set.idx.
type growth struct {
	old  index
	p, j int
	left int
	step int // records moved per Append
}

// startGrowth replaces the full index, which no growth is moving from,
// with a larger empty one and starts moving the records into it, the newest (just appended, not yet indexed)
// excepted: the caller inserts it.
func (s *Set) startGrowth() {
	s.grow.old = s.idx
	s.idx = newIndex(s.size.after(s.idx.ng))
	s.publish()
	s.grow.p, s.grow.j, s.grow.left = 0, s.head, s.count-1
	if s.grow.left == 0 {
		s.grow.old = index{}
	}
}

// migrate moves up to n records from the old index's share into s.idx, in
// batches whose home groups are touched before any is written (as rebuild
// does), and ends the growth when none is left.
func (s *Set) migrate(n int) {
	const batch = 32
	x := &s.idx
	var homes [batch]uint64
	var ids [batch]uint32
	var fps [batch]FP
	for n > 0 && s.grow.left > 0 {
		k := 0
		for k < batch && k < n && s.grow.left > 0 {
			c := &s.chunks[s.grow.p]
			if s.grow.j == c.n {
				s.grow.p, s.grow.j = s.grow.p+1, 0
				continue
			}
			r := &c.recs[s.grow.j]
			fps[k] = FP{Lo: r.lo, Hi: r.hi}
			ids[k] = s.id(s.grow.p, s.grow.j)
			homes[k] = x.home(s.homeBits(fps[k]))
			s.grow.j++
			s.grow.left--
			k++
		}
		x.touchAll(homes[:k])
		for i := range k {
			x.insertAt(homes[i], x.stride(stepBits(fps[i])), tagOf(fps[i]), ids[i])
		}
		n -= k
	}
	if s.grow.left == 0 {
		s.grow.old = index{}
	}
}

// indexed returns the records the index accounts for: those in idx plus
// those a growth has not moved yet. It equals Len.
func (s *Set) indexed() int { return s.idx.n + s.grow.left }

// GrowthBytes reports the part of Bytes held only while the index grows:
// the old index, released when its records have moved.
func (s *Set) GrowthBytes() int { return s.grow.old.bytes() }
