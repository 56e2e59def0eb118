package compact

import (
	"math/rand/v2"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/compactbench"
)

// BenchmarkMoveCost prices one record's move in the two ways an index can
// grow, on a Set of n random fingerprints (10M with IDEM_BENCH_10M=1):
//
//	IDEM_BENCH_10M=1 go test -run '^$' -bench '^BenchmarkMoveCost$' -benchtime 3x ./internal/compact
//
// "rebuild" is what a growth does now (Set.rebuild, as migrate): read the
// records in ring order (sequential) and insert each at its home group of
// a new index of the whole set (a random write). "split" is what
// splitting the small tables of a directory would do, since a slot holds
// a record id and an 8-bit tag but not the fingerprint bits that choose a
// record's new table and home: walk the old index's slots in order
// (sequential), read each record by id (a random read, 32 loaded at once
// as migrate does) and insert it into a table of 128 groups (8 KiB, in
// L1), emptied every 1,024 records. At 10M (2026-12-01) a split's move
// cost 1.4 to 1.5 times a rebuild's (doc.go, "What was measured and
// rejected").
func BenchmarkMoveCost(b *testing.B) {
	n := benchN()
	r := rand.New(rand.NewPCG(3, 4))
	s := NewSet()
	for i := range n {
		if err := s.Append(FP{Lo: r.Uint64(), Hi: r.Uint32()}, Rec{T: int64(i), Seq: uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
	s.rebuild(s.size.groups(s.count))
	rebuild := func(b *testing.B) {
		start := compactbench.Start()
		for b.Loop() {
			s.rebuild(s.size.groups(s.count))
		}
		compactbench.ReportTime(b, b.N*n, start, "ns/move")
	}
	split := func(b *testing.B) {
		start := compactbench.Start()
		for b.Loop() {
			small := newIndex(128)
			var ids [32]uint32
			var sink uint32
			k := 0
			flush := func() {
				for _, id := range ids[:k] {
					_, rc := s.rec(id)
					sink += rc.hi
				}
				for _, id := range ids[:k] {
					_, rc := s.rec(id)
					fp := FP{Lo: rc.lo, Hi: rc.hi}
					if small.n == 1024 {
						clear(small.groups)
						small.n = 0
					}
					small.insert(s.homeBits(fp), stepBits(fp), tagOf(fp), id)
				}
				k = 0
			}
			for g := range s.idx.groups {
				gr := &s.idx.groups[g]
				for i, t := range gr.tags {
					if t != 0 {
						ids[k] = gr.ids[i]
						if k++; k == len(ids) {
							flush()
						}
					}
				}
			}
			flush()
			s.idx.touch += uint16(sink)
		}
		compactbench.ReportTime(b, b.N*n, start, "ns/move")
	}
	alternate(b, "rebuild", rebuild, "split", split)
}
