package window

// arena stores the bytes of every live key (scope then id) in 64 KiB chunks,
// appended in arrival order. Keys expire in arrival order too, so whole
// chunks are released from the front once the oldest live key has moved
// past them: no per-key allocation, no per-key pointer for the garbage
// collector to trace, and memory that follows the number of live keys.
type arena struct {
	chunks [][]byte // live chunks, oldest first; chunks[i] is chunk number base+i
	base   uint32   // number of chunks[0]; numbers wrap, compare by difference
	free   [][]byte // released chunks kept for reuse
}

const (
	chunkSize = 64 << 10
	// maxSpare bounds the released chunks kept for reuse, so a steady
	// stream reuses chunks instead of allocating, and a burst's chunks are
	// returned to the garbage collector afterwards.
	maxSpare = 2
)

// add appends scope then id and returns where they start. The caller has
// checked that len(scope)+len(id) <= chunkSize.
func (a *arena) add(scope, id string) (chunk, off uint32) {
	need := len(scope) + len(id)
	if n := len(a.chunks); n == 0 || cap(a.chunks[n-1])-len(a.chunks[n-1]) < need {
		var c []byte
		if k := len(a.free); k > 0 {
			c, a.free[k-1] = a.free[k-1], nil
			a.free = a.free[:k-1]
		} else {
			c = make([]byte, 0, chunkSize)
		}
		a.chunks = append(a.chunks, c)
	}
	last := len(a.chunks) - 1
	c := a.chunks[last]
	off = uint32(len(c))
	c = append(c, scope...)
	a.chunks[last] = append(c, id...)
	return a.base + uint32(last), off
}

// key returns the stored scope and id bytes of an entry.
func (a *arena) key(e *entry) (scope, id []byte) {
	c := a.chunks[e.chunk-a.base]
	k := c[e.off : e.off+e.scopeLen+e.idLen]
	return k[:e.scopeLen], k[e.scopeLen:]
}

// releaseBefore releases every chunk numbered before chunk.
func (a *arena) releaseBefore(chunk uint32) {
	for a.base != chunk && len(a.chunks) > 0 {
		a.release()
	}
}

// releaseAll releases every chunk; the next add starts a fresh one.
func (a *arena) releaseAll() {
	for len(a.chunks) > 0 {
		a.release()
	}
}

func (a *arena) release() {
	c := a.chunks[0]
	a.chunks[0] = nil
	a.chunks = a.chunks[1:]
	a.base++
	if len(a.free) < maxSpare {
		a.free = append(a.free, c[:0])
	}
}

// bytes reports the memory the arena holds, spare chunks included.
func (a *arena) bytes() int {
	n := 0
	for _, c := range a.chunks {
		n += cap(c)
	}
	for _, c := range a.free {
		n += cap(c)
	}
	return n
}
