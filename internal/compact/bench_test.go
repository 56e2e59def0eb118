package compact

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/compactbench"
)

// BenchmarkSetFill fills a Set with n random fingerprints (Find, then
// Append), beside a map[[16]byte]int64 filled by insert-if-absent with the
// same bytes, in the same run: the index and its growth without the
// fingerprint function. 10M ids with IDEM_BENCH_10M=1.
//
//	go test -run '^$' -bench SetFill -benchtime 1x -count 3 ./internal/compact
func BenchmarkSetFill(b *testing.B) {
	n := benchN()
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
	alternate(b, "set", set, "map", mp)
}

// benchN is the benchmarks' set size: 1M, or 10M with IDEM_BENCH_10M=1.
func benchN() int {
	if os.Getenv("IDEM_BENCH_10M") == "1" {
		return 10_000_000
	}
	return 1_000_000
}

// alternate runs sides a and b twice, in the order a b b a, so that
// neither is always the first.
func alternate(b *testing.B, aName string, a func(*testing.B), bName string, bf func(*testing.B)) {
	b.Run(aName, a)
	b.Run(bName, bf)
	b.Run(bName, bf)
	b.Run(aName, a)
}

// BenchmarkSum measures the fingerprint function alone on UUIDv4 ids in
// scope "orders": Key.Sum (SipHash-2-4 of scope and the 36-byte text, what
// every id cost before the AES path), Hasher.Sum of canonical UUIDs (the
// AES path) and of the same UUIDs in uppercase (which take the SipHash
// path through the Hasher), SumBuf with a buffer of the caller's (what
// window.Dedup does: no allocation), and ParseUUID alone.
//
//	go test -run '^$' -bench '^BenchmarkSum$' -count 3 ./internal/compact
func BenchmarkSum(b *testing.B) {
	strs, _ := compactbench.UUIDs(1 << 12)
	upper := make([]string, len(strs))
	for i, s := range strs {
		upper[i] = strings.ToUpper(s)
	}
	k := NewKey()
	h := NewHasher(k)
	var sink FP
	b.Run("siphash", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			sink = k.Sum("orders", strs[i&(len(strs)-1)])
		}
	})
	b.Run("uuid-aes", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			sink = h.Sum("orders", strs[i&(len(strs)-1)])
		}
	})
	b.Run("uuid-aes-buf", func(b *testing.B) { // as window.Dedup calls it
		buf := new([16]byte)
		for i := 0; b.Loop(); i++ {
			sink = h.SumBuf("orders", strs[i&(len(strs)-1)], buf)
		}
	})
	b.Run("uppercase-siphash", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			sink = h.Sum("orders", upper[i&(len(upper)-1)])
		}
	})
	b.Run("parse", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			u, _ := ParseUUID(strs[i&(len(strs)-1)])
			sink.Lo += uint64(u[0])
		}
	})
	_ = sink
}
