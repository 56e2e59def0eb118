package window_test

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idem-go/idem/internal/testsupport/compactbench"
	"github.com/idem-go/idem/window"
)

// Benchmarks: Dedup beside a plain map[string]time.Time behind a mutex (the
// baseline a hand-rolled window dedup starts from), at 1M live ids.
//
//	go test -run '^$' -bench . -benchtime 2s ./window
//
// Seen/*/new cycles through 1M UUID-string ids with the clock advancing so
// that each id's window has just closed when it comes round again: every
// call accepts a new id and (for Dedup) expires the oldest, 1M live ids in
// steady state. Seen/*/dup repeats ids still in the window. Memory/* reports
// the heap each structure holds per live id (heapB/id) after 1M inserts;
// the baseline copies each id, as any dedup that outlives the message
// buffer its id came from must.

const benchIDs = 1 << 20

var (
	poolOnce sync.Once
	pool     []string
)

// ids returns benchIDs distinct 36-character UUID-formatted strings.
func ids() []string {
	poolOnce.Do(func() {
		pool = make([]string, benchIDs)
		var x uint64 = 0x9e3779b97f4a7c15
		var raw [16]byte
		for i := range pool {
			for j := range raw {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				raw[j] = byte(x)
			}
			pool[i] = uuid.UUID(raw).String()
		}
	})
	return pool
}

// mapWindow is the baseline: a map of first-accept times, never pruned.
type mapWindow struct {
	mu   sync.Mutex
	w    time.Duration
	seen map[string]time.Time
}

func (m *mapWindow) Seen(id string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if first, ok := m.seen[id]; ok && now.Sub(first) < m.w {
		return true
	}
	m.seen[strings.Clone(id)] = now
	return false
}

func BenchmarkSeen(b *testing.B) {
	all := ids()
	t0 := time.Unix(1_700_000_000, 0)
	w := time.Duration(benchIDs) // one id per nanosecond: 1M live ids

	b.Run("window/new", func(b *testing.B) {
		d, _ := window.New(w)
		for i, id := range all { // warm up to the steady state
			d.Seen("orders", id, t0.Add(time.Duration(i)))
		}
		b.ReportAllocs()
		for i := benchIDs; b.Loop(); i++ {
			if dup, _ := d.Seen("orders", all[i&(benchIDs-1)], t0.Add(time.Duration(i))); dup {
				b.Fatal("duplicate")
			}
		}
	})
	b.Run("window/dup", func(b *testing.B) {
		d, _ := window.New(time.Hour)
		for _, id := range all {
			d.Seen("orders", id, t0)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if dup, _ := d.Seen("orders", all[i&(benchIDs-1)], t0); !dup {
				b.Fatal("not a duplicate")
			}
		}
	})
	b.Run("baseline-map/new", func(b *testing.B) {
		m := &mapWindow{w: w, seen: map[string]time.Time{}}
		for i, id := range all {
			m.Seen(id, t0.Add(time.Duration(i)))
		}
		b.ReportAllocs()
		for i := benchIDs; b.Loop(); i++ {
			if m.Seen(all[i&(benchIDs-1)], t0.Add(time.Duration(i))) {
				b.Fatal("duplicate")
			}
		}
	})
	b.Run("baseline-map/dup", func(b *testing.B) {
		m := &mapWindow{w: time.Hour, seen: map[string]time.Time{}}
		for _, id := range all {
			m.Seen(id, t0)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if !m.Seen(all[i&(benchIDs-1)], t0) {
				b.Fatal("not a duplicate")
			}
		}
	})
}

// BenchmarkMemory reports the heap held per live id at 1M ids, and the
// time per insert while building the set.
func BenchmarkMemory(b *testing.B) {
	all := ids()
	t0 := time.Unix(1_700_000_000, 0)
	report := func(b *testing.B, before uint64, start time.Time, keep any) {
		elapsed := time.Since(start)
		held := compactbench.HeapInUse() - before
		runtime.KeepAlive(keep)
		b.ReportMetric(float64(held)/benchIDs, "heapB/id")
		b.ReportMetric(float64(elapsed.Nanoseconds())/benchIDs, "ns/insert")
	}
	b.Run("window-1M", func(b *testing.B) {
		for b.Loop() {
			before := compactbench.HeapInUse()
			start := time.Now()
			d, _ := window.New(time.Hour)
			for _, id := range all {
				d.Seen("orders", id, t0)
			}
			report(b, before, start, d)
		}
	})
	b.Run("baseline-map-1M", func(b *testing.B) {
		for b.Loop() {
			before := compactbench.HeapInUse()
			start := time.Now()
			m := &mapWindow{w: time.Hour, seen: map[string]time.Time{}}
			for _, id := range all {
				m.Seen(id, t0)
			}
			report(b, before, start, m)
		}
	})
}
