package compact

import (
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// TestSetMatchesModel runs random appends, lookups and drops against a map
// and a list, with the home bits narrowed (all ids share a few homes, so
// probe chains are long and wrap the table end) or not, and with time
// jumps that close chunks early.
func TestSetMatchesModel(t *testing.T) {
	t.Parallel()
	for _, mask := range []uint32{^uint32(0), 0xf0000000, 0x80000001} {
		rapid.Check(t, func(rt *rapid.T) {
			aux := rapid.Bool().Draw(rt, "aux")
			s := NewSet()
			if aux {
				s = NewSetAux()
			}
			s.homeMask = mask
			s.publish()
			if rapid.Bool().Draw(rt, "schedule") {
				// Another size schedule, as memstore's shards use.
				f := rapid.SampledFrom([]float64{1.2, 1.5, 2.9}).Draw(rt, "growth")
				s.SetGrowth(f, rapid.Float64Range(0, 0.999).Draw(rt, "phase"), rapid.SampledFrom([]int{1, 32, 128}).Draw(rt, "schedstep"))
			}
			if rapid.Bool().Draw(rt, "incremental") {
				// Grow incrementally from the smallest index, moving 1 or 8
				// records an append (with 1, the new index fills before
				// the move ends, which finishes it early).
				s.syncBelow = 0
				s.grow.step = rapid.SampledFrom([]int{1, 8}).Draw(rt, "step")
			}
			model := map[FP]Rec{}
			token := rapid.Uint64Range(0, 1<<40).Draw(rt, "token0")
			var order []FP
			now := int64(rapid.Int64Range(-1<<40, 1<<40).Draw(rt, "t0"))
			seq := uint64(1)
			universe := rapid.IntRange(1, 150).Draw(rt, "universe")
			fpOf := func(k int) FP { return FP{Lo: uint64(k)*0x9e3779b97f4a7c15 ^ uint64(k)<<32, Hi: uint32(k)} }
			for range rapid.IntRange(1, 2000).Draw(rt, "ops") {
				switch rapid.IntRange(0, 9).Draw(rt, "op") {
				case 0:
					now += rapid.Int64Range(0, 1<<33).Draw(rt, "jump")
				case 1:
					cut := now - rapid.Int64Range(0, 100).Draw(rt, "age")
					want := 0
					for len(order) > 0 && model[order[0]].T <= cut {
						delete(model, order[0])
						order = order[1:]
						want++
					}
					if got := s.DropThrough(cut); got != want {
						rt.Fatalf("DropThrough(%d) = %d, want %d", cut, got, want)
					}
				default:
					now += rapid.Int64Range(0, 3).Draw(rt, "tick")
					fp := fpOf(rapid.IntRange(0, universe).Draw(rt, "k"))
					got, ok := s.Find(fp)
					m, mok := model[fp]
					if ok != mok || got != m {
						rt.Fatalf("Find = (%+v, %v), model (%+v, %v)", got, ok, m, mok)
					}
					if ok {
						continue
					}
					r := Rec{T: now, Seq: seq}
					if aux {
						// Tokens mostly rise, sometimes fall back, sometimes jump.
						switch rapid.IntRange(0, 9).Draw(rt, "tokstep") {
						case 0:
							token -= min(token, rapid.Uint64Range(0, 1<<33).Draw(rt, "back"))
						case 1:
							token += rapid.Uint64Range(0, 1<<34).Draw(rt, "fwd")
						case 2, 3:
							token += rapid.Uint64Range(0, 9).Draw(rt, "small")
						case 4:
							token -= min(token, rapid.Uint64Range(0, 9).Draw(rt, "smallback"))
						default:
							token++
						}
						r.Aux = token
					}
					if err := s.Append(fp, r); err != nil {
						rt.Fatal(err)
					}
					model[fp] = r
					order = append(order, fp)
					seq += uint64(rapid.IntRange(1, 2).Draw(rt, "seqstep")) // gaps start new chunks
				}
				checkIndex(rt, s)
				if s.Len() != len(model) || s.indexed() != len(model) {
					rt.Fatalf("Len %d, index %d, model %d", s.Len(), s.indexed(), len(model))
				}
				if t, ok := s.Newest(); ok != (len(order) > 0) || (ok && t != model[order[len(order)-1]].T) {
					rt.Fatalf("Newest = (%d, %v) with %d records", t, ok, len(order))
				}
			}
			i := 0
			s.Each(func(fp FP, r Rec) {
				if i >= len(order) || order[i] != fp || model[fp] != r {
					rt.Fatalf("Each record %d = (%v, %+v) out of order or wrong", i, fp, r)
				}
				i++
			})
			if i != len(order) {
				rt.Fatalf("Each gave %d records, want %d", i, len(order))
			}
			if n := s.DropThrough(now); n != len(order) || s.Len() != 0 || len(s.chunks) != 0 {
				rt.Fatalf("final drop %d of %d, Len %d, chunks %d", n, len(order), s.Len(), len(s.chunks))
			}
		})
	}
}

// TestSetGrowsAndShrinks checks that the index and chunks follow the live
// records through a burst and its expiry, and that the index never holds
// more than it should.
func TestSetGrowsAndShrinks(t *testing.T) {
	t.Parallel()
	s := NewSet()
	k := NewKey()
	const n = 200_000
	for i := range n {
		fp := k.Sum("s", string(rune(i))+"x")
		if _, ok := s.Find(fp); ok {
			continue
		}
		if err := s.Append(fp, Rec{T: int64(i), Seq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if load := float64(s.indexed()) / float64(s.idx.slots()); load > 0.92 || load < 0.6 {
		t.Fatalf("load %.2f after growth", load)
	}
	// The old index of a growth in progress is transient (see grow.go).
	if perRec := float64(s.Bytes()-s.grow.old.bytes()) / float64(s.Len()); perRec > 24 {
		t.Fatalf("%.1f bytes per record", perRec)
	}
	if peak := float64(s.Bytes()) / float64(s.Len()); peak > 30 {
		t.Fatalf("%.1f bytes per record while growing", peak)
	}
	s.DropThrough(n - 11)
	if s.Len() != 10 || s.idx.ng > minGroups || len(s.chunks) != 1 {
		t.Fatalf("after expiry: Len %d, index groups %d, chunks %d", s.Len(), s.idx.ng, len(s.chunks))
	}
}

// checkIndex verifies the index's invariants: every record's slot is on
// its probe path, every group it passed counts it in over, and the counts
// are exactly those passings.
func checkIndex(t interface{ Fatalf(string, ...any) }, s *Set) {
	x := &s.idx
	want := make([]int, x.ng)
	n := 0
	for g := range x.groups {
		for i, tag := range x.groups[g].tags {
			if tag == 0 {
				continue
			}
			n++
			id := x.groups[g].ids[i]
			_, r := s.rec(id)
			fp := FP{Lo: r.lo, Hi: r.hi}
			if tagOf(fp) != tag {
				t.Fatalf("group %d slot %d: tag %d, record's %d", g, i, tag, tagOf(fp))
			}
			step := x.stride(stepBits(fp))
			for h := x.home(s.homeBits(fp)); h != uint64(g); h = x.next(h, step) {
				want[h]++
			}
		}
	}
	if n != x.n {
		t.Fatalf("index counts %d slots, holds %d", x.n, n)
	}
	for g := range x.groups {
		if int(x.groups[g].over) != want[g] {
			t.Fatalf("group %d: overflow count %d, want %d", g, x.groups[g].over, want[g])
		}
	}
}

// TestSparseArrivalsShareChunks checks that ids arriving far apart in time
// (more than the 32-bit offset covers) still share a chunk, so a slow
// stream costs bytes per id, not a chunk per id.
func TestSparseArrivalsShareChunks(t *testing.T) {
	t.Parallel()
	s := NewSet()
	for i := range 100 {
		fp := FP{Lo: uint64(i) * 0x9e3779b97f4a7c15, Hi: uint32(i)}
		if err := s.Append(fp, Rec{T: int64(i) * 10e9, Seq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.chunks) != 1 {
		t.Fatalf("100 ids 10 s apart in %d chunks, want 1", len(s.chunks))
	}
	for i := range 100 {
		r, ok := s.Find(FP{Lo: uint64(i) * 0x9e3779b97f4a7c15, Hi: uint32(i)})
		if !ok || r.T != int64(i)*10e9 || r.Seq != uint64(i+1) {
			t.Fatalf("id %d: %+v %v", i, r, ok)
		}
	}
}

// TestIncrementalGrowth grows a set incrementally, moving one record an
// append (so a growth is still under way when the new index fills, which
// then rebuilds it), while the oldest records expire in
// the middle of moves, and checks every live record is found, every
// dropped one is not, and the index accounts for each record.
func TestIncrementalGrowth(t *testing.T) {
	t.Parallel()
	for _, step := range []int{1, 2, 32} {
		s := NewSet()
		s.syncBelow, s.grow.step = 0, step
		fp := func(i int) FP { return FP{Lo: uint64(i)*0x9e3779b97f4a7c15 + 1, Hi: uint32(i) ^ 0x5bd1e995} }
		const n, keep = 6_000, 1_000
		dropMoving := 0
		for i := range n {
			if err := s.Append(fp(i), Rec{T: int64(i), Seq: uint64(i + 1)}); err != nil {
				t.Fatal(err)
			}
			if s.grow.left > 0 && s.grow.p == 0 && s.grow.j-s.head <= 32 {
				// A growth has just begun: expire the next 100 records,
				// most of them not moved yet.
				oldest, _ := s.Oldest()
				left := s.grow.left
				s.DropThrough(oldest + 100)
				if s.grow.left < left {
					dropMoving++
				}
			}
			if i%7 == 0 && i >= keep {
				s.DropThrough(int64(i - keep))
			}
			if s.indexed() != s.Len() {
				t.Fatalf("step %d, append %d: index accounts for %d of %d", step, i, s.indexed(), s.Len())
			}
			if i%499 == 0 {
				checkIndex(t, s)
				oldest, _ := s.Oldest()
				for j := 0; j <= i; j++ {
					r, ok := s.Find(fp(j))
					if live := int64(j) >= oldest; ok != live || (ok && r.Seq != uint64(j+1)) {
						t.Fatalf("step %d, after %d: Find(%d) = %+v %v, live %v", step, i, j, r, ok, live)
					}
				}
			}
		}
		if dropMoving == 0 {
			t.Fatalf("step %d: no drop met records not yet moved", step)
		}
	}
}

// TestSetAuxLayouts checks each way a chunk keeps aux values (implied,
// sparse rebases, skew bytes, rebases beside skew) against the values
// appended, and what each costs in Bytes.
func TestSetAuxLayouts(t *testing.T) {
	t.Parallel()
	const n = 3 * chunkLen
	cases := []struct {
		name   string
		aux    func(i int) uint64
		arrays int // chunks with a skew array
	}{
		{"one apart", func(i int) uint64 { return 1<<40 + uint64(i) }, 0},
		{"a few out of order", func(i int) uint64 {
			if i%chunkLen == 100 || i%chunkLen == 700 {
				return 1<<40 + uint64(i) + 1 // and the next record continues
			}
			return 1<<40 + uint64(i)
		}, 0},
		{"swapped pairs", func(i int) uint64 { return 1<<40 + uint64(i^1) }, 3},
		{"jumps", func(i int) uint64 { return uint64(i)*1000 + uint64(i%3) }, 3},
		{"shuffled late", func(i int) uint64 {
			if i < n-chunkLen/2 {
				return uint64(i)
			}
			return uint64(i) + uint64(i%5)*200 // beyond a byte of skew
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSetAux()
			k := NewKey()
			fps := make([]FP, n)
			for i := range n {
				fps[i] = k.Sum("aux", string(rune(i))+"y")
				if err := s.Append(fps[i], Rec{T: int64(i), Seq: uint64(i), Aux: tc.aux(i)}); err != nil {
					t.Fatal(err)
				}
			}
			for i, fp := range fps {
				r, ok := s.Find(fp)
				if !ok || r.Aux != tc.aux(i) || r.Seq != uint64(i) {
					t.Fatalf("record %d: (%+v, %v), want aux %d", i, r, ok, tc.aux(i))
				}
			}
			arrays := 0
			for i := range s.chunks {
				if s.chunks[i].skew != nil {
					arrays++
				}
				if c := &s.chunks[i]; c.skew == nil && len(c.auxes) > sparseAuxes {
					t.Fatalf("chunk %d: %d rebases and no skew array", i, len(c.auxes))
				}
			}
			if arrays != tc.arrays {
				t.Fatalf("%d chunks with a skew array, want %d", arrays, tc.arrays)
			}
			i := 0
			s.Each(func(fp FP, r Rec) {
				if fp != fps[i] || r.Aux != tc.aux(i) {
					t.Fatalf("Each record %d: aux %d, want %d", i, r.Aux, tc.aux(i))
				}
				i++
			})
		})
	}
}

// TestStaggeredGrowth fills sets that grow by a factor of 1.6, as
// memstore's shards do, with phases spread over a step, and checks that
// together their indexes hold about the average of a step at every size,
// not one index's peak: the reason a larger factor (fewer moves) costs
// no more memory. With one phase for all, the same check fails.
func TestStaggeredGrowth(t *testing.T) {
	t.Parallel()
	const (
		sets = 32
		per  = 40_000 // records a set at the end, past syncGrowBelow
		f    = 1.6
	)
	avg := float64(groupBytes) / groupLen * f * math.Log(f) / ((f - 1) * maxLoadPct / 100)
	run := func(staggered bool) (lo, hi float64) {
		ss := make([]*Set, sets)
		for i := range ss {
			ss[i] = NewSet()
			phase := 0.0
			if staggered {
				phase = float64(i) / sets
			}
			ss[i].SetGrowth(f, phase, migrateStep)
		}
		lo, hi = math.Inf(1), 0
		r := rand.New(rand.NewPCG(5, 6))
		for n := range sets * per {
			s := ss[r.IntN(sets)]
			if err := s.Append(FP{Lo: r.Uint64(), Hi: r.Uint32()}, Rec{T: int64(n), Seq: s.NextSeq()}); err != nil {
				t.Fatal(err)
			}
			if n%4096 == 0 && n >= sets*per/8 {
				idx := 0
				for _, s := range ss {
					idx += s.idx.bytes()
				}
				b := float64(idx) / float64(n+1)
				lo, hi = min(lo, b), max(hi, b)
			}
		}
		return lo, hi
	}
	lo, hi := run(true)
	t.Logf("staggered: index %.2f to %.2f bytes a record, average of a step %.2f", lo, hi, avg)
	if lo < avg-0.4 || hi > avg+0.4 {
		t.Errorf("staggered: index %.2f to %.2f bytes a record, want within 0.4 of %.2f", lo, hi, avg)
	}
	lo, hi = run(false)
	t.Logf("one phase: index %.2f to %.2f bytes a record", lo, hi)
	if hi < avg+1 {
		t.Errorf("one phase: index peaked at %.2f bytes a record, expected a peak well above %.2f", hi, avg)
	}
}

// TestSizing checks the size schedule: a growth always takes a larger
// size, by between half a step and a step and a half, and a rebuild's size
// holds its records at maxLoad/f at most.
func TestSizing(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		z := sizing{f: rapid.Float64Range(1.05, 3).Draw(rt, "f"), phase: rapid.Float64Range(0, 0.999).Draw(rt, "phase")}
		ng := nextPrime(rapid.Uint64Range(minGroups, 1<<28).Draw(rt, "ng"))
		next := z.after(ng)
		if lo, hi := float64(ng)*math.Sqrt(z.f)*0.999, float64(ng)*z.f*math.Sqrt(z.f)*1.001+1; float64(next) < lo || float64(next) > hi {
			rt.Fatalf("after(%d) = %d with f %.3f: want in [%.0f, %.0f]", ng, next, z.f, lo, hi)
		}
		n := rapid.IntRange(0, math.MaxInt32).Draw(rt, "n")
		g := z.groups(n)
		if g < minGroups || float64(n) > float64(g)*groupLen*maxLoadPct/100/z.f*1.000001 {
			rt.Fatalf("groups(%d) = %d with f %.3f: load %.3f over %.3f", n, g, z.f, float64(n)/float64(g*groupLen), maxLoadPct/100/z.f)
		}
		// (Small sizes are rounded up to whole groups by more than a step.)
		if g > 1000 && float64(n) <= float64(g)/z.f*groupLen*maxLoadPct/100/z.f*0.999 {
			rt.Fatalf("groups(%d) = %d with f %.3f: a size a step smaller would hold it", n, g, z.f)
		}
	})
}

// TestSetReserve: a set reserved for n records fills to n without growing
// its index, keeps that index when its records are dropped, and grows as
// usual past n; SizeFor sizes without a floor.
func TestSetReserve(t *testing.T) {
	t.Parallel()
	const n = 50_000
	s := NewSet()
	s.Reserve(n)
	ng := s.idx.ng
	if float64(n) > float64(s.idx.slots())*maxLoadPct/100 {
		t.Fatalf("reserved %d slots for %d records", s.idx.slots(), n)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range n {
		if err := s.Append(FP{Lo: r.Uint64(), Hi: r.Uint32()}, Rec{T: int64(i), Seq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		if s.idx.ng != ng || s.GrowthBytes() != 0 {
			t.Fatalf("record %d: index %d groups (reserved %d), growth %d bytes", i, s.idx.ng, ng, s.GrowthBytes())
		}
	}
	s.Reserve(n / 2) // smaller: nothing
	groups := &s.idx.groups[0]
	for cut := int64(0); cut < n; cut += 1000 { // each drop under the shrink load
		s.DropThrough(cut)
	}
	if s.DropThrough(n); s.Len() != 0 || s.idx.ng != ng || &s.idx.groups[0] != groups {
		t.Fatalf("after dropping all: %d records, index %d groups (reserved %d), rebuilt %v", s.Len(), s.idx.ng, ng, &s.idx.groups[0] != groups)
	}
	for i := range 2 * n {
		if err := s.Append(FP{Lo: r.Uint64(), Hi: r.Uint32()}, Rec{T: int64(n + i), Seq: uint64(n + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if s.idx.ng <= ng {
		t.Fatalf("past the reservation: index %d groups, reserved %d", s.idx.ng, ng)
	}

	u := NewSet()
	u.SizeFor(n)
	if sized := u.idx.ng; sized <= minGroups || u.DropThrough(0) != 0 {
		t.Fatalf("SizeFor(%d): %d groups", n, sized)
	}
	u.Append(FP{Lo: 1}, Rec{T: 1, Seq: 1})
	if u.DropThrough(1); u.idx.ng != minGroups {
		t.Fatalf("SizeFor keeps a floor: %d groups after dropping all", u.idx.ng)
	}
}
