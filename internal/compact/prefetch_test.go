package compact

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestPrefetchWhileOwnerWrites calls Prefetch without the owner's lock
// while the owner appends through incremental growths, drops records
// (shrinking rebuilds) and reserves: under -race, Prefetch must read
// nothing the owner writes. After every call the owner makes, the
// published hint must be the current index: an index change that does
// not publish would leave Prefetch loading a released one.
func TestPrefetchWhileOwnerWrites(t *testing.T) {
	t.Parallel()
	s := NewSetAux()
	s.syncBelow, s.grow.step = 0, 4
	checkHint(t, s, "new")
	var mu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := uint64(w); !stop.Load(); i += 2 {
				s.Prefetch(FP{Lo: i * 0x9e3779b97f4a7c15, Hi: uint32(i)})
			}
		})
	}
	fp := func(i int) FP { return FP{Lo: uint64(i)*0xbf58476d1ce4e5b9 + 7, Hi: uint32(i) * 0x94d049bb} }
	const n = 40_000
	for i := range n {
		mu.Lock()
		if err := s.Append(fp(i), Rec{T: int64(i), Seq: uint64(i + 1), Aux: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		checkHint(t, s, "append")
		switch {
		case i == n/2:
			s.DropThrough(int64(i - 100)) // down to 100 records: the index shrinks
			checkHint(t, s, "drop")
		case i == n/2+1_000:
			s.Reserve(30_000)
			checkHint(t, s, "reserve")
		}
		mu.Unlock()
	}
	stop.Store(true)
	wg.Wait()
	for i := n/2 - 99; i < n; i++ {
		if r, ok := s.Find(fp(i)); !ok || r.Seq != uint64(i+1) {
			t.Fatalf("Find(%d) = %+v, %v after the prefetches", i, r, ok)
		}
	}
}

// checkHint fails unless the set's published hint is its index.
func checkHint(t *testing.T, s *Set, after string) {
	t.Helper()
	h := s.hint.Load()
	if h == nil || h.ng != s.idx.ng || h.groups != unsafe.Pointer(&s.idx.groups[0]) || h.mask != s.homeMask {
		t.Fatalf("after %s: the published hint is not the index of %d groups", after, s.idx.ng)
	}
}
