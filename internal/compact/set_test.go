package compact

import (
	"errors"
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

func TestAppendFull(t *testing.T) {
	t.Parallel()
	s := NewSet()
	s.count = MaxRecords
	if err := s.Append(FP{Lo: 1}, Rec{Seq: 1}); !errors.Is(err, ErrFull) {
		t.Fatalf("Append at MaxRecords = %v, want ErrFull", err)
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
