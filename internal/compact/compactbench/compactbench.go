// Package compactbench holds what the memory benchmarks of window,
// memstore and sequence share: random UUIDv4 keys, the live heap after a
// full collection, and the Go map baseline they are measured beside, in the
// same run.
package compactbench

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// UUIDs returns n random UUIDv4s, as 36-byte strings and as raw bytes. The
// strings are substrings of one allocation, so that the garbage collector
// does not mark n objects in every cycle of a run (which would charge the
// side that allocates with the benchmark's own keys).
func UUIDs(n int) ([]string, [][16]byte) {
	var all strings.Builder
	all.Grow(36 * n)
	raws := make([][16]byte, n)
	for i := range n {
		u := uuid.New()
		raws[i] = u
		all.WriteString(u.String())
	}
	s := all.String()
	strs := make([]string, n)
	for i := range strs {
		strs[i] = s[36*i : 36*i+36]
	}
	return strs, raws
}

// HeapInUse returns the live heap after a full collection.
func HeapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Report reports heapB/key (the live heap now, minus before, per key) and
// the time per key since start, under the name perKey (ns/insert, ns/key).
func Report(b *testing.B, n int, before uint64, start time.Time, perKey string) {
	elapsed := time.Since(start)
	held := HeapInUse() - before
	b.ReportMetric(float64(held)/float64(n), "heapB/key")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), perKey)
}

// Map is the baseline: a map[[16]byte]int64 filled from empty by
// insert-if-absent, reported as Report does.
func Map(b *testing.B, raws [][16]byte, perKey string) {
	for b.Loop() {
		before := HeapInUse()
		start := time.Now()
		m := map[[16]byte]int64{}
		for i, k := range raws {
			if _, ok := m[k]; ok {
				b.Fatal("duplicate")
			}
			m[k] = int64(i)
		}
		Report(b, len(raws), before, start, perKey)
		runtime.KeepAlive(m)
	}
}
