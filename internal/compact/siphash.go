package compact

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
)

// Key is a 128-bit secret key for the fingerprint function. Each process
// draws a fresh one ([NewKey]) so that nobody who lacks it can craft two ids
// with the same fingerprint; a snapshot carries the key so that a restored
// set keeps fingerprinting ids the same way.
type Key [16]byte

// NewKey returns a random key from crypto/rand.
func NewKey() Key {
	var k Key
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails (Go 1.24+)
	return k
}

// FP is a 96-bit keyed fingerprint of an id: the first 96 bits of its
// SipHash-2-4-128 under the set's Key. Two distinct ids get the same FP
// with probability 2⁻⁹⁶, so among n live ids some pair collides with
// probability about n²/2⁹⁷: 6.3×10⁻¹² at 10⁹, 6.3×10⁻¹⁰ at 10¹⁰.
type FP struct {
	Lo uint64
	Hi uint32
}

// Sum returns the fingerprint of the pair (scope, id). The scope's length
// is hashed first (as a uvarint), so ("ab", "c") and ("a", "bc") are
// different inputs.
func (k *Key) Sum(scope, id string) FP {
	var pre [binary.MaxVarintLen64]byte
	// At most 8 bytes: no string is 2⁵⁶ bytes long.
	n := binary.PutUvarint(pre[:], uint64(len(scope)))
	lo, hi := sumParts(k, binary.LittleEndian.Uint64(pre[:8]), n, scope, id)
	return FP{Lo: lo, Hi: uint32(hi)}
}

// sumParts is SipHash-2-4-128 of the n (≤ 8) low bytes of pre followed by
// a and b, in one pass with the state in local variables (registers);
// only the 8-byte words that straddle a boundary are assembled bytewise.
func sumParts(k *Key, pre uint64, n int, a, b string) (uint64, uint64) {
	k0 := binary.LittleEndian.Uint64(k[0:8])
	k1 := binary.LittleEndian.Uint64(k[8:16])
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d ^ 0xee
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	m := pre & (1<<(8*n) - 1) // all of pre when n is 8
	nm := n
	total := n + len(a) + len(b)
	for _, p := range [2]string{a, b} {
		for nm > 0 && nm < 8 && len(p) > 0 {
			m |= uint64(p[0]) << (8 * nm)
			nm++
			p = p[1:]
		}
		if nm == 8 {
			v3 ^= m
			v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
			v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
			v0 ^= m
			m, nm = 0, 0
		}
		for ; len(p) >= 8; p = p[8:] {
			w := uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
				uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
			v3 ^= w
			v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
			v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
			v0 ^= w
		}
		for i := 0; i < len(p); i++ { // nm is 0 here: p was consumed up to a word boundary
			m |= uint64(p[i]) << (8 * (nm + i))
		}
		nm += len(p)
	}
	m |= uint64(total) << 56
	v3 ^= m
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= 0xee
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	lo := v0 ^ v1 ^ v2 ^ v3
	v1 ^= 0xdd
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	return lo, v0 ^ v1 ^ v2 ^ v3
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
