package diskwindow

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// probeBatch is the number of values in each of probeBatches' batches.
const probeBatch = 4096

// probeBatches returns 64 batches of probeBatch random values of f bits,
// and for each batch its values' indexes sorted as AddBatch sorts them.
func probeBatches(r *rand.Rand, f uint) (vals []u128, cand [][]int) {
	vals = randVals(r, 64*probeBatch, f)
	cand = make([][]int, 64)
	for j := range cand {
		for i := j * probeBatch; i < (j+1)*probeBatch; i++ {
			cand[j] = append(cand[j], i)
		}
		slices.SortFunc(cand[j], func(a, b int) int {
			if vals[a].less(vals[b]) {
				return -1
			}
			return 1
		})
	}
	return vals, cand
}

// BenchmarkProbe probes a generation of 2²² values, in memory only, with
// batches of 4096 absent values sorted as AddBatch sorts them: one value
// probed an op; cpu-ns/value is the process's CPU time (getrusage) a
// value, the figure to read on a loaded machine. "each" is one value after the other (matches), "batch"
// all buckets first (matchBatch).
func BenchmarkProbe(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	const f = 85
	g, err := openGen(mustWriteGen(b, randVals(r, 1<<22, f), f), f, 42, false)
	if err != nil {
		b.Fatal(err)
	}
	defer g.close()
	vals, cand := probeBatches(r, f)
	b.Run("each", func(b *testing.B) {
		var pos []uint64
		hits := 0
		cpu0 := cpuTime()
		for n := 0; b.Loop(); n++ {
			for _, i := range cand[n%64] {
				pos = g.matches(vals[i], pos[:0])
				hits += len(pos)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*probeBatch), "ns/value")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*probeBatch), "cpu-ns/value")
	})
	b.Run("batch", func(b *testing.B) {
		var span [][2]uint64
		hits := 0
		cpu0 := cpuTime()
		for n := 0; b.Loop(); n++ {
			span = g.matchBatch(vals, cand[n%64], span, func(int, uint64) { hits++ })
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*probeBatch), "ns/value")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*probeBatch), "cpu-ns/value")
	})
}

// BenchmarkProbeLarge probes a generation of the default WithMaxOpen
// size (5·2²³ values, about 40 MB in memory: well past the caches) with
// batches of 4096 absent values sorted as AddBatch sorts them, one value
// after the other (matches) and staged (matchBatch), alternated in rounds
// of 8 batches each, and reports the median of each's thread CPU time a
// value: the figure that stays put on a loaded machine.
func BenchmarkProbeLarge(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	const f, n = 85, 5 << 23
	g, err := openGen(mustWriteGen(b, randVals(r, n, f), f), f, 42, false)
	if err != nil {
		b.Fatal(err)
	}
	defer g.close()
	vals, cand := probeBatches(r, f)
	var span [][2]uint64
	var pos []uint64
	hits := 0
	ways := []struct {
		name  string
		probe func(c []int)
	}{
		{"each", func(c []int) {
			for _, i := range c {
				pos = g.matches(vals[i], pos[:0])
				hits += len(pos)
			}
		}},
		{"staged", func(c []int) { span = g.matchBatch(vals, c, span, func(int, uint64) { hits++ }) }},
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	spent := make([][]float64, len(ways))
	for n := 0; b.Loop(); n++ {
		for k := range ways {
			k = (k + n) % len(ways) // who goes first rotates
			t0 := threadCPU()
			for j := range 8 {
				ways[k].probe(cand[(8*n+j)%64])
			}
			spent[k] = append(spent[k], float64((threadCPU()-t0).Nanoseconds())/(8*probeBatch))
		}
	}
	for k, w := range ways {
		slices.Sort(spent[k])
		b.ReportMetric(spent[k][len(spent[k])/2], w.name+"-thread-ns/value")
	}
}

func mustWriteGen(b testing.TB, vals []u128, f uint) string {
	path, err := writeGen(b.TempDir(), 1, f, 42, vals, 1, 2)
	if err != nil {
		b.Fatal(err)
	}
	return path
}

// TestSelectInWord checks selectInWord against the bit-by-bit definition.
func TestSelectInWord(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		x := r.Uint64()
		if r.IntN(4) == 0 {
			x &= r.Uint64() & r.Uint64() // sparse
		}
		k := uint64(0)
		for i := range uint(64) {
			if x>>i&1 == 1 {
				k++
				if got := selectInWord(x, k); got != i {
					t.Fatalf("selectInWord(%#x, %d) = %d, want %d", x, k, got, i)
				}
			}
		}
	}
}

// TestGenMemory: the in-memory part of a generation (its read buffer
// aside, a constant 8 KiB a file) stays under 1 byte an id at the sizes
// where it is largest: n at a power of two with five mid bits, and n at
// 1.25 times one with six; and six bits halve the false matches.
func TestGenMemory(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	const f = 85
	for _, n := range []int{1 << 20, 5<<18 - 1, 5 << 18, 1<<21 - 1} {
		g, err := openGen(mustWriteGen(t, randVals(r, n, f), f), f, 42, false)
		if err != nil {
			t.Fatal(err)
		}
		perID := float64(g.memBytes()-len(g.buf)) / float64(n)
		false_ := 0
		const probes = 100_000
		for range probes {
			if g.maybe(u128{hi: r.Uint64(), lo: r.Uint64()}.low(f)) {
				false_++
			}
		}
		rate := float64(false_) / probes
		want := float64(n) / float64(uint64(1)<<(g.l.u+g.l.r)) // n/2^(u+r)
		t.Logf("n=%d r=%d: %.4f B an id in memory, %.4f false matches (n/2^(u+r) = %.4f)", n, g.l.r, perID, rate, want)
		if perID > 1 {
			t.Errorf("n=%d: %.4f bytes an id in memory, over 1", n, perID)
		}
		if rate > 1.2*want {
			t.Errorf("n=%d: %.4f false matches, want about %.4f", n, rate, want)
		}
		if wantR := midBitsFor(uint64(n)); g.l.r != wantR {
			t.Errorf("n=%d: %d mid bits, want %d", n, g.l.r, wantR)
		}
		g.close()
	}
}
