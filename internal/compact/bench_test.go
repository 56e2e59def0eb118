package compact

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/idem-go/idem/internal/compact/compactbench"
)

// BenchmarkSetFill fills a Set with n random fingerprints (Find, then
// Append), beside a map[[16]byte]int64 filled by insert-if-absent with the
// same bytes, in the same run: the index and its growth without the
// fingerprint function. 10M ids with IDEM_BENCH_10M=1.
//
//	go test -run '^$' -bench SetFill -benchtime 1x -count 3 ./internal/compact
func BenchmarkSetFill(b *testing.B) {
	n := 1_000_000
	if os.Getenv("IDEM_BENCH_10M") == "1" {
		n = 10_000_000
	}
	r := rand.New(rand.NewPCG(1, 2))
	fps := make([]FP, n)
	raws := make([][16]byte, n)
	for i := range fps {
		fps[i] = FP{Lo: r.Uint64(), Hi: r.Uint32()}
		binary.LittleEndian.PutUint64(raws[i][:], fps[i].Lo)
		binary.LittleEndian.PutUint32(raws[i][8:], fps[i].Hi)
	}
	set := func(b *testing.B) {
		start := compactbench.Start()
		for b.Loop() {
			s := NewSet()
			for i, fp := range fps {
				if _, ok := s.Find(fp); ok {
					b.Fatal("duplicate")
				}
				if err := s.Append(fp, Rec{T: int64(i), Seq: uint64(i)}); err != nil {
					b.Fatal(err)
				}
			}
		}
		compactbench.ReportTime(b, b.N*n, start, "ns/insert")
	}
	mp := func(b *testing.B) {
		start := compactbench.Start()
		for b.Loop() {
			m := map[[16]byte]int64{}
			for i, k := range raws {
				if _, ok := m[k]; ok {
					b.Fatal("duplicate")
				}
				m[k] = int64(i)
			}
		}
		compactbench.ReportTime(b, b.N*n, start, "ns/insert")
	}
	for round := range 2 {
		if round%2 == 0 {
			b.Run("set", set)
			b.Run("map", mp)
		} else {
			b.Run("map", mp)
			b.Run("set", set)
		}
	}
}
