package window_test

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idem-go/idem/internal/testsupport/compactbench"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/window"
)

// BenchmarkCompact measures issue 16's goals at 1M random UUIDv4 ids, and at
// 10M too when IDEM_BENCH_10M=1, for window.Dedup.Add beside a Go
// map[[16]byte]int64 doing insert-if-absent, in the same run:
//
//	go test -run '^$' -bench Compact -benchtime 1x -count 3 ./window
//	IDEM_BENCH_10M=1 go test -run '^$' -bench Compact -benchtime 1x -count 3 -timeout 30m ./window
//
// Each iteration builds the structure from empty (growth included) and
// reports heapB/key (live heap after runtime.GC, minus the heap before) and
// ns/insert. The map gets the UUID's 16 raw bytes, the Dedup its 36-byte
// string, as each would be used; "window-batch" adds the same ids with
// AddBatch, 100 at a time. "window" also reports max-us/64adds, the
// longest wall time of 64 consecutive Adds (a growth's pause, or a wait
// for a core on a loaded machine). BenchmarkCompactSteady
// measures the steady state. "window-capacity" and "map-sized" fill a
// Dedup made WithCapacity(n) and a map made with a size hint of n: both
// sized up front, neither grows.
func BenchmarkCompact(b *testing.B) {
	for n, name := range benchSizes() {
		strs, raws := compactbench.UUIDs(n)
		t0 := time.Unix(1_700_000_000, 0)
		b.Run(name+"/window", func(b *testing.B) {
			for b.Loop() {
				before := compactbench.HeapInUse()
				start := compactbench.Start()
				d, _ := window.New(time.Hour)
				var longest time.Duration // the longest wall time of 64 Adds: the index's growth pauses
				last := time.Now()
				for i, s := range strs {
					if dup, _, err := d.Add("orders", s, t0.Add(time.Duration(i))); dup || err != nil {
						b.Fatal("duplicate or error", err)
					}
					if i&63 == 63 {
						now := time.Now()
						longest, last = max(longest, now.Sub(last)), now
					}
				}
				compactbench.Report(b, n, before, start, "ns/insert")
				b.ReportMetric(float64(longest.Microseconds()), "max-us/64adds")
				// Of heapB/key, what a growth under way at n holds until its
				// move ends (n/32 Adds later at most): 0 unless n fell in one.
				b.ReportMetric(float64(window.GrowthBytes(d))/float64(n), "growB/key")
				runtime.KeepAlive(d)
			}
		})
		b.Run(name+"/window-batch", func(b *testing.B) {
			var out []window.Result
			for b.Loop() {
				before := compactbench.HeapInUse()
				start := compactbench.Start()
				d, _ := window.New(time.Hour)
				for i := 0; i < n; i += benchBatch {
					out = d.AddBatch("orders", strs[i:min(i+benchBatch, n)], t0.Add(time.Duration(i)), out[:0])
					for _, r := range out {
						if r.Dup || r.Err != nil {
							b.Fatal("duplicate or error", r.Err)
						}
					}
				}
				compactbench.Report(b, n, before, start, "ns/insert")
				b.ReportMetric(float64(window.GrowthBytes(d))/float64(n), "growB/key")
				runtime.KeepAlive(d)
			}
		})
		b.Run(name+"/map", func(b *testing.B) { compactbench.Map(b, raws, "ns/insert") })
		// Both sized up front for the n ids: window.WithCapacity and a
		// map's size hint. No growth on either side.
		b.Run(name+"/window-capacity", func(b *testing.B) {
			for b.Loop() {
				before := compactbench.HeapInUse()
				start := compactbench.Start()
				d, _ := window.New(time.Hour, window.WithCapacity(n))
				for i, s := range strs {
					if dup, _, err := d.Add("orders", s, t0.Add(time.Duration(i))); dup || err != nil {
						b.Fatal("duplicate or error", err)
					}
				}
				compactbench.Report(b, n, before, start, "ns/insert")
				runtime.KeepAlive(d)
			}
		})
		b.Run(name+"/map-sized", func(b *testing.B) { compactbench.MapSized(b, raws, "ns/insert") })
		strs, raws = nil, nil
		runtime.GC()
	}
}

// BenchmarkCompactSteady measures ns/op at n live ids where each new id
// expires the oldest (a window of n ns, one id a nanosecond; the map
// deletes the key n back): no growth in either, the state a running window
// is in. Run it with a count of operations:
//
//	go test -run '^$' -bench CompactSteady -benchtime 1000000x -count 3 ./window
func BenchmarkCompactSteady(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	for n, name := range benchSizes() {
		strs, raws := compactbench.UUIDs(n)
		// Steady state: n live ids, each new id expires the oldest (a
		// window of n ns, one id a nanosecond); the map deletes the id n
		// back. No growth in either (a growth the fill left under way is
		// finished by steady Adds before the timer starts): what a full
		// window costs per message.
		b.Run(name+"/window-steady", func(b *testing.B) {
			d, t1, fresh := steadyWindow(b, strs, t0)
			b.ResetTimer()
			start := compactbench.Start()
			defer compactbench.ReportTime(b, b.N, start, "ns/insert")
			for i := range b.N {
				if dup, _, err := d.Add("orders", fresh[i], t1.Add(time.Duration(i))); dup || err != nil {
					b.Fatal("duplicate or error", err)
				}
			}
		})
		b.Run(name+"/window-steady-batch", func(b *testing.B) {
			d, t1, fresh := steadyWindow(b, strs, t0)
			var out []window.Result
			b.ResetTimer()
			start := compactbench.Start()
			defer compactbench.ReportTime(b, b.N, start, "ns/insert")
			for i := 0; i < b.N; i += benchBatch {
				out = d.AddBatch("orders", fresh[i:min(i+benchBatch, b.N)], t1.Add(time.Duration(i)), out[:0])
				for _, r := range out {
					if r.Dup || r.Err != nil {
						b.Fatal("duplicate or error", r.Err)
					}
				}
			}
		})
		b.Run(name+"/map-steady", func(b *testing.B) {
			m := make(map[[16]byte]int64, n)
			ring := make([][16]byte, n)
			for i, k := range raws {
				m[k] = int64(i)
				ring[i] = k
			}
			fresh := make([][16]byte, b.N)
			for i := range fresh {
				fresh[i] = uuid.New()
			}
			b.ResetTimer()
			start := compactbench.Start()
			defer compactbench.ReportTime(b, b.N, start, "ns/insert")
			for i := range b.N {
				k := fresh[i]
				if _, ok := m[k]; ok {
					b.Fatal("duplicate")
				}
				m[k] = int64(n + i)
				old := &ring[i%n]
				delete(m, *old)
				*old = k
			}
		})
	}
}

// benchBatch is the batch size of the AddBatch benchmarks: a JetStream
// pull consumer's usual fetch.
const benchBatch = 100

func benchSizes() map[int]string {
	sizes := map[int]string{1_000_000: "ids=1M"}
	if os.Getenv("IDEM_BENCH_10M") == "1" {
		sizes[10_000_000] = "ids=10M"
	}
	return sizes
}

// BenchmarkCompactGC holds a structure of 1M (10M) random UUIDv4 ids, built
// without keeping the ids anywhere else, runs a loop allocating pointerful
// garbage until 20 GC cycles have passed, and reports their p99 pause
// (runtime/metrics /gc/pauses:seconds) and the GC's CPU time per cycle.
// "none" holds nothing; "memstore" is a memory key store whose keys were
// completed with empty results (the compact tier); "map-string" is a map[string]int64 of the UUID
// strings, the pointerful shape the pre-issue-16 stores had.
func BenchmarkCompactGC(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	for n, name := range benchSizes() {
		b.Run(name+"/none", func(b *testing.B) {
			for b.Loop() {
				reportGC(b)
			}
		})
		b.Run(name+"/window", func(b *testing.B) {
			for b.Loop() {
				d, _ := window.New(time.Hour)
				for i := range n {
					d.Add("orders", uuid.NewString(), t0.Add(time.Duration(i)))
				}
				reportGC(b)
				runtime.KeepAlive(d)
			}
		})
		b.Run(name+"/memstore", func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				s, err := memstore.New(memstore.WithMaxKeys(n))
				if err != nil {
					b.Fatal(err)
				}
				for range n {
					c, err := s.Reserve(ctx, uuid.NewString(), nil, time.Minute)
					if err == nil {
						err = s.Complete(ctx, c, nil, time.Hour)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				reportGC(b)
				s.Close()
			}
		})
		b.Run(name+"/map", func(b *testing.B) {
			for b.Loop() {
				m := make(map[[16]byte]int64)
				for i := range n {
					m[uuid.New()] = int64(i)
				}
				reportGC(b)
				runtime.KeepAlive(m)
			}
		})
		b.Run(name+"/map-string", func(b *testing.B) {
			for b.Loop() {
				m := make(map[string]int64)
				for i := range n {
					m[uuid.NewString()] = int64(i)
				}
				reportGC(b)
				runtime.KeepAlive(m)
			}
		})
	}
}

// gcSink keeps the garbage loop's allocations from being optimised away.
var gcSink []*[8]*int

// reportGC allocates pointerful garbage until at least 20 GC cycles have
// run and reports their p99 pause and the GC CPU time per cycle.
func reportGC(b *testing.B) {
	samples := []metrics.Sample{
		{Name: "/gc/pauses:seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
	}
	metrics.Read(samples)
	before := samples[0].Value.Float64Histogram()
	counts := append([]uint64(nil), before.Counts...)
	cycles0, cpu0 := samples[1].Value.Uint64(), samples[2].Value.Float64()
	for {
		gcSink = make([]*[8]*int, 0, 1<<16)
		for range 1 << 16 {
			gcSink = append(gcSink, new([8]*int))
		}
		metrics.Read(samples)
		if samples[1].Value.Uint64()-cycles0 >= 20 {
			break
		}
	}
	gcSink = nil
	after := samples[0].Value.Float64Histogram()
	var total uint64
	for i := range after.Counts {
		counts[i] = after.Counts[i] - counts[i]
		total += counts[i]
	}
	p99 := 0.0
	var acc uint64
	for i, c := range counts {
		acc += c
		if float64(acc) >= 0.99*float64(total) {
			p99 = after.Buckets[i+1]
			if math.IsInf(p99, 1) {
				p99 = after.Buckets[i]
			}
			break
		}
	}
	cycles := samples[1].Value.Uint64() - cycles0
	b.ReportMetric(p99*1e6, "gcP99-µs")
	b.ReportMetric((samples[2].Value.Float64()-cpu0)/float64(cycles)*1e3, "gcCPU-ms/cycle")
}

// steadyWindow returns a window of len(strs) ns holding strs, added one a
// nanosecond from t0, with no growth of its index under way; the time to
// add at from then on, each id expiring the oldest; and b.N fresh ids.
func steadyWindow(b *testing.B, strs []string, t0 time.Time) (*window.Dedup, time.Time, []string) {
	n := len(strs)
	d, _ := window.New(time.Duration(n))
	for i, s := range strs {
		d.Add("orders", s, t0.Add(time.Duration(i)))
	}
	t1 := finishGrowth(b, d, t0.Add(time.Duration(n)))
	fresh, _ := compactbench.UUIDs(b.N)
	return d, t1, fresh
}

// finishGrowth adds fresh ids to d, one a nanosecond from t (each expiring
// the oldest), until no growth of its index is under way, and returns the
// time after the last.
func finishGrowth(b *testing.B, d *window.Dedup, t time.Time) time.Time {
	for window.GrowthBytes(d) > 0 {
		if dup, _, err := d.Add("orders", uuid.NewString(), t); dup || err != nil {
			b.Fatal("duplicate or error", err)
		}
		t = t.Add(1)
	}
	return t
}
