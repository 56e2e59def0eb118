package compact

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestMemoryCurve writes the bytes a record of sets as they fill, by
// Set.Bytes (records, index, the old index of a growth under way, chunk
// directory), to the CSV at IDEM_COMPACT_CURVE_CSV, every 2% of the count
// from 100k to IDEM_COMPACT_CURVE_KEYS (10M by default), for tools/benchchart
// (docs/img/compact-memory.svg; make bench-compact-curve):
//
//   - "window": one set, as a window.Dedup keeps, with and without the old
//     index of a growth under way (the sawtooth of a single schedule);
//   - "memstore": 64 sets with aux values filled at random, as memstore's
//     shards: growth 1.5 with phases i/64 (what memstore does), with one
//     phase for all, and at the default 1.35 (before staggering).
//
// The points are the sets' own accounting, which the live-heap figures of
// BenchmarkCompact match to within about 0.3 bytes a record at 1M and 10M.
//
// Without IDEM_COMPACT_CURVE_CSV it draws the curve to 300k into a
// temporary file (make test). Either way it checks what window documents:
// between growths a set holds 21.8 to 24 bytes a record at every point.
func TestMemoryCurve(t *testing.T) {
	path := os.Getenv("IDEM_COMPACT_CURVE_CSV")
	keys := 10_000_000
	if path == "" {
		path, keys = filepath.Join(t.TempDir(), "curve.csv"), 300_000
	}
	if v := os.Getenv("IDEM_COMPACT_CURVE_KEYS"); v != "" {
		if _, err := fmt.Sscan(v, &keys); err != nil {
			t.Fatalf("IDEM_COMPACT_CURVE_KEYS=%q: %v", v, err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := func(series, variant string, n int, bpk float64) {
		if _, err := fmt.Fprintf(f, "%s,%s,%d,0,0,%.3f\n", series, variant, n, bpk); err != nil {
			t.Fatal(err)
		}
	}
	// at reports whether n is one of the curve's points.
	next := 100_000.0
	at := func(n int) bool {
		if float64(n) < next {
			return false
		}
		for next <= float64(n) {
			next = math.Ceil(next * 1.02)
		}
		return true
	}
	r := rand.New(rand.NewPCG(9, 10))
	{
		s := NewSet()
		next = 100_000
		for n := 1; n <= keys; n++ {
			if err := s.Append(FP{Lo: r.Uint64(), Hi: r.Uint32()}, Rec{T: int64(n), Seq: uint64(n)}); err != nil {
				t.Fatal(err)
			}
			if at(n) {
				row("window", "one set", n, float64(s.Bytes())/float64(n))
				between := float64(s.Bytes()-s.GrowthBytes()) / float64(n)
				row("window", "one set without a growth's old index", n, between)
				// Below 1M the chunk directory and the newest chunk add up
				// to 0.2 bytes a record (window's documentation says so).
				limit := 24.0
				if n < 1_000_000 {
					limit = 24.2
				}
				if between < 21.8 || between > limit {
					t.Errorf("one set of %d records: %.2f bytes a record between growths, documented 21.8 to 24 (24.2 below 1M)", n, between)
				}
			}
		}
	}
	for _, v := range []struct {
		name      string
		f         float64
		staggered bool
		step      int
	}{
		{"64 sets at 1.5 with phases i/64 (memstore)", 1.5, true, 128},
		{"64 sets at 1.5 with one phase", 1.5, false, 128},
		{"64 sets at 1.35 with one phase (before)", defaultSizing.f, false, migrateStep},
	} {
		var sets [64]*Set
		for i := range sets {
			sets[i] = NewSetAux()
			phase := 0.0
			if v.staggered {
				phase = float64(i) / 64
			}
			sets[i].SetGrowth(v.f, phase, v.step)
		}
		next = 100_000
		total := 0
		for n := 1; n <= keys; n++ {
			s := sets[r.IntN(len(sets))]
			if err := s.Append(FP{Lo: r.Uint64(), Hi: r.Uint32()}, Rec{T: int64(n), Seq: s.NextSeq(), Aux: uint64(s.Len())}); err != nil {
				t.Fatal(err)
			}
			if at(n) {
				total = 0
				for _, s := range sets {
					total += s.Bytes()
				}
				row("memstore", v.name, n, float64(total)/float64(n))
			}
		}
	}
}
