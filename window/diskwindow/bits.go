package diskwindow

import (
	"encoding/binary"
	"math/bits"
)

// u128 is a fingerprint of up to 96 bits as one unsigned number.
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

// rsh returns a >> s for s < 128.
func (a u128) rsh(s uint) u128 {
	switch {
	case s == 0:
		return a
	case s >= 64:
		return u128{0, a.hi >> (s - 64)}
	}
	return u128{a.hi >> s, a.lo>>s | a.hi<<(64-s)}
}

// lsh returns a << s for s < 128.
func (a u128) lsh(s uint) u128 {
	switch {
	case s == 0:
		return a
	case s >= 64:
		return u128{a.lo << (s - 64), 0}
	}
	return u128{a.hi<<s | a.lo>>(64-s), a.lo << s}
}

func (a u128) or(b u128) u128 { return u128{a.hi | b.hi, a.lo | b.lo} }

// low returns the w low bits of a (w ≤ 128).
func (a u128) low(w uint) u128 {
	if w >= 64 {
		return u128{a.hi & (1<<(w-64) - 1), a.lo}
	}
	return u128{0, a.lo & (1<<w - 1)}
}

// getWords returns the w ≤ 64 bits at bit p of the little-endian bit
// stream in ws (bit k is bit k%64 of ws[k/64]).
func getWords(ws []uint64, p uint64, w uint) uint64 {
	if w == 0 {
		return 0
	}
	i, off := p/64, uint(p%64)
	v := ws[i] >> off
	if off+w > 64 {
		v |= ws[i+1] << (64 - off)
	}
	return v & (1<<w - 1)
}

// putWords ors the w ≤ 64 low bits of v into ws at bit p.
func putWords(ws []uint64, p uint64, w uint, v uint64) {
	if w == 0 {
		return
	}
	v &= 1<<w - 1
	i, off := p/64, uint(p%64)
	ws[i] |= v << off
	if off+w > 64 {
		ws[i+1] |= v >> (64 - off)
	}
}

// getBytes returns the w ≤ 64 bits at bit p of the little-endian bit
// stream in b (bit k is bit k%8 of b[k/8]), reading b[p/8 : (p+w+7)/8].
func getBytes(b []byte, p uint64, w uint) uint64 {
	if i, off := p/8, uint(p%8); w > 0 && i+9 <= uint64(len(b)) {
		v := binary.LittleEndian.Uint64(b[i:]) >> off
		if off+w > 64 {
			v |= uint64(b[i+8]) << (64 - off)
		}
		if w < 64 {
			v &= 1<<w - 1
		}
		return v
	}
	var v uint64
	got := uint(0)
	for got < w {
		i, off := (p+uint64(got))/8, uint((p+uint64(got))%8)
		take := min(8-off, w-got)
		v |= uint64(b[i]>>off&(1<<take-1)) << got
		got += take
	}
	return v
}

// getWide returns the w ≤ 128 bits at bit p of b.
func getWide(b []byte, p uint64, w uint) u128 {
	if w <= 64 {
		return u128{0, getBytes(b, p, w)}
	}
	return u128{getBytes(b, p+64, w-64), getBytes(b, p, 64)}
}

// selectInWord returns the position of the k-th (k ≥ 1) set bit of x,
// which has at least k.
func selectInWord(x uint64, k uint64) uint {
	r := k - 1 // set bits to pass
	pos := uint(0)
	if c := uint64(bits.OnesCount32(uint32(x))); r >= c {
		r, x, pos = r-c, x>>32, 32
	}
	if c := uint64(bits.OnesCount16(uint16(x))); r >= c {
		r, x, pos = r-c, x>>16, pos+16
	}
	if c := uint64(bits.OnesCount8(uint8(x))); r >= c {
		r, x, pos = r-c, x>>8, pos+8
	}
	return pos + uint(select8[uint8(x)][r&7])
}

// select8[b][r] is the position of set bit r (from 0) of byte b.
var select8 = func() (t [256][8]uint8) {
	for b := range 256 {
		r := 0
		for i := range 8 {
			if b>>i&1 == 1 {
				t[b][r] = uint8(i)
				r++
			}
		}
	}
	return t
}()

// lowWriter packs a little-endian bit stream into blocks of blockSize
// bytes, eight bytes at a time, and passes each block to full when it is
// filled (the last one zero-padded by flush). full may keep no reference
// to the block.
type lowWriter struct {
	acc   uint64 // pending bits, the oldest lowest
	n     uint   // pending bit count, < 64
	block []byte // blockSize bytes
	off   int    // bytes of block filled, a multiple of 8
	full  func(block []byte)
}

func (w *lowWriter) word(x uint64) {
	binary.LittleEndian.PutUint64(w.block[w.off:], x)
	w.off += 8
	if w.off == len(w.block) {
		w.full(w.block)
		w.off = 0
	}
}

// put appends the width ≤ 64 low bits of v.
func (w *lowWriter) put(v uint64, width uint) {
	if width == 0 {
		return
	}
	if width < 64 {
		v &= 1<<width - 1
	}
	w.acc |= v << w.n
	if w.n+width < 64 {
		w.n += width
		return
	}
	w.word(w.acc)
	spill := w.n + width - 64 // v's bits not yet written
	w.acc = 0
	if spill > 0 {
		w.acc = v >> (width - spill)
	}
	w.n = spill
}

func (w *lowWriter) putWide(v u128, width uint) {
	if width <= 64 {
		w.put(v.lo, width)
		return
	}
	w.put(v.lo, 64)
	w.put(v.hi, width-64)
}

// flush writes the pending bits and the last block, zero-padded.
func (w *lowWriter) flush() {
	if w.n > 0 {
		w.word(w.acc)
		w.acc, w.n = 0, 0
	}
	if w.off > 0 {
		clear(w.block[w.off:])
		w.full(w.block)
		w.off = 0
	}
}
