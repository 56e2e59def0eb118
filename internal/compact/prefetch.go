package compact

import "unsafe"

// Prefetching a home group before the owner's lock.
//
// A lookup in a large set misses the cache once, on its home group (about
// 200 ns at 10M records on the benchmark machine), and its owner then
// waits for that line with its lock held. Prefetch starts the miss before
// the caller locks, so that it overlaps whatever the caller does next: the
// lock, a clock read, its own bookkeeping. Prefetch must not read the
// Set's fields, which its owner changes under the lock, so each index
// publishes what Prefetch needs (its first group and size) in an immutable
// probeHint, swapped atomically whenever the index is replaced.

// probeHint is an index as Prefetch sees it. It is never changed once
// published; it keeps its groups alive until the next one replaces it.
type probeHint struct {
	groups unsafe.Pointer // &index.groups[0]
	ng     uint64
	mask   uint32 // Set.homeMask
}

// publish makes the current index what Prefetch reads. Called by the
// owner, with the set locked, after every change of s.idx.
func (s *Set) publish() {
	s.hint.Store(&probeHint{groups: unsafe.Pointer(&s.idx.groups[0]), ng: s.idx.ng, mask: s.homeMask})
}

// Prefetch asks the CPU to load the index group where fp's lookup starts,
// without waiting for it. Unlike every other method, it may be called
// without the owner's lock, concurrently with any other call: it reads
// only the published probeHint, and a prefetch cannot fault or change
// memory. A prefetch of an index that has just been replaced is wasted,
// not wrong. On architectures without a prefetch instruction here (any
// but amd64 and arm64) it does nothing.
func (s *Set) Prefetch(fp FP) {
	h := s.hint.Load()
	g := (uint64(uint32(fp.Lo>>32)&h.mask) * h.ng) >> 32 // index.home
	prefetch(unsafe.Add(h.groups, g*groupBytes))
}
