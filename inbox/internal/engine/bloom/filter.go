package bloom

import (
	"encoding/binary"
	"math/bits"
)

// Filter is a blocked Bloom filter over 16-byte digests.
type Filter struct {
	blocks [][8]uint64
}

// New returns a filter for c keys at bitsPerKey.
func New(c, bitsPerKey int64) *Filter {
	n := max((c*bitsPerKey+511)/512, 1)
	return &Filter{blocks: make([][8]uint64, n)}
}

// blockOf picks the block from the digest's hash bytes 8..16 and the bits
// from a mix of bytes 6..16 (bytes 0..6 are a UUIDv7's time).
func (f *Filter) blockOf(d [16]byte) (*[8]uint64, uint64) {
	a := binary.LittleEndian.Uint64(d[8:])
	hi, _ := bits.Mul64(a, uint64(len(f.blocks)))
	x := a ^ uint64(binary.LittleEndian.Uint16(d[6:]))<<48 ^ 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return &f.blocks[hi], x ^ x>>31
}

// Add adds d.
func (f *Filter) Add(d [16]byte) {
	b, x := f.blockOf(d)
	for i := 0; i < 7; i++ {
		p := x >> (9 * i) & 511
		b[p/64] |= 1 << (p % 64)
	}
}

// MayContain reports whether d may have been added (false: it surely was
// not).
func (f *Filter) MayContain(d [16]byte) bool {
	b, x := f.blockOf(d)
	for i := 0; i < 7; i++ {
		p := x >> (9 * i) & 511
		if b[p/64]&(1<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

// Bytes is the filter's memory.
func (f *Filter) Bytes() int64 { return int64(len(f.blocks)) * 64 }
