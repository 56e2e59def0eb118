// Package compactbench holds what the memory benchmarks of window,
// memstore and sequence share: random UUIDv4 keys, the live heap after a
// full collection, and the Go map baseline they are measured beside, in the
// same run. Its [CPUTime] serves every benchmark that reports CPU time.
package compactbench

import (
	"runtime"
	"strings"
	"syscall"
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

// Mark is a point in wall-clock and process CPU time.
type Mark struct {
	wall time.Time
	cpu  time.Duration
}

// Start returns the Mark of now.
func Start() Mark { return Mark{wall: time.Now(), cpu: CPUTime()} }

// CPUTime returns the CPU time the process has used, user and system, on
// every thread (the garbage collector's included): on a machine shared
// with other jobs a truer cost than the wall clock.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportTime reports the wall-clock time per op since start under the
// name perOp, and the process CPU time per op under "cpu-"+perOp. On a
// machine shared with other jobs the CPU time is the steadier one: it does
// not count the time the benchmark waited for a core.
func ReportTime(b *testing.B, ops int, start Mark, perOp string) {
	wall, cpu := time.Since(start.wall), CPUTime()-start.cpu
	b.ReportMetric(float64(wall.Nanoseconds())/float64(ops), perOp)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(ops), "cpu-"+perOp)
}

// Report reports heapB/key (the live heap now, minus before, per key) and
// the times per key since start (see ReportTime), under the name perKey
// (ns/insert, ns/key).
func Report(b *testing.B, n int, before uint64, start Mark, perKey string) {
	ReportTime(b, n, start, perKey)
	held := HeapInUse() - before
	b.ReportMetric(float64(held)/float64(n), "heapB/key")
}

// Map is the baseline: a map[[16]byte]int64 filled from empty by
// insert-if-absent, reported as Report does.
func Map(b *testing.B, raws [][16]byte, perKey string) { fillMap(b, raws, perKey, 0) }

// MapSized is Map with the map made with a size hint of len(raws): the
// baseline of a structure sized up front.
func MapSized(b *testing.B, raws [][16]byte, perKey string) {
	fillMap(b, raws, perKey, len(raws))
}

func fillMap(b *testing.B, raws [][16]byte, perKey string, hint int) {
	for b.Loop() {
		before := HeapInUse()
		start := Start()
		m := make(map[[16]byte]int64, hint)
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
