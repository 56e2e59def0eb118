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
	n := binary.PutUvarint(pre[:], uint64(len(scope)))
	if n > 8 {
		var s sip // a scope of 2⁵⁶ bytes or more: never in practice
		s.init(k)
		s.writeBytes(pre[:n])
		s.writeString(scope)
		s.writeString(id)
		lo, hi := s.sum128()
		return FP{Lo: lo, Hi: uint32(hi)}
	}
	lo, hi := sumParts(k, binary.LittleEndian.Uint64(pre[:8]), n, scope, id)
	return FP{Lo: lo, Hi: uint32(hi)}
}

// sumParts is SipHash-2-4-128 of the n (< 8) low bytes of pre followed by
// a and b, in one pass with the state in local variables (registers);
// only the 8-byte words that straddle a boundary are assembled bytewise.
func sumParts(k *Key, pre uint64, n int, a, b string) (uint64, uint64) {
	k0 := binary.LittleEndian.Uint64(k[0:8])
	k1 := binary.LittleEndian.Uint64(k[8:16])
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d ^ 0xee
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	m := pre & (1<<(8*n) - 1)
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

// sum128 is SipHash-2-4-128 of p in one pass, with the state in local
// variables so that it stays in registers (the streaming sip keeps it in
// memory, about 3× slower).
func sum128(k *Key, p []byte) (uint64, uint64) {
	k0 := binary.LittleEndian.Uint64(k[0:8])
	k1 := binary.LittleEndian.Uint64(k[8:16])
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d ^ 0xee
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(p)
	for ; len(p) >= 8; p = p[8:] {
		m := binary.LittleEndian.Uint64(p)
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
	}
	m := uint64(n) << 56
	for i := len(p) - 1; i >= 0; i-- {
		m |= uint64(p[i]) << (8 * i)
	}
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

// sip is a streaming SipHash-2-4 (Aumasson and Bernstein), in the 128-bit
// output variant. It is a PRF under its key, which is what makes the
// fingerprints safe against crafted ids.
type sip struct {
	v0, v1, v2, v3 uint64
	buf            [8]byte
	nbuf           int
	total          uint64
}

func (s *sip) init(k *Key) {
	k0 := binary.LittleEndian.Uint64(k[0:8])
	k1 := binary.LittleEndian.Uint64(k[8:16])
	s.v0 = k0 ^ 0x736f6d6570736575
	s.v1 = k1 ^ 0x646f72616e646f6d ^ 0xee
	s.v2 = k0 ^ 0x6c7967656e657261
	s.v3 = k1 ^ 0x7465646279746573
}

func (s *sip) round() {
	s.v0 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 13)
	s.v1 ^= s.v0
	s.v0 = bits.RotateLeft64(s.v0, 32)
	s.v2 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 16)
	s.v3 ^= s.v2
	s.v0 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 21)
	s.v3 ^= s.v0
	s.v2 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 17)
	s.v1 ^= s.v2
	s.v2 = bits.RotateLeft64(s.v2, 32)
}

func (s *sip) block(m uint64) {
	s.v3 ^= m
	s.round()
	s.round()
	s.v0 ^= m
}

func (s *sip) writeString(p string) {
	s.total += uint64(len(p))
	if s.nbuf > 0 {
		n := copy(s.buf[s.nbuf:], p)
		s.nbuf += n
		p = p[n:]
		if s.nbuf < 8 {
			return
		}
		s.block(binary.LittleEndian.Uint64(s.buf[:]))
		s.nbuf = 0
	}
	for len(p) >= 8 {
		s.block(uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
			uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56)
		p = p[8:]
	}
	s.nbuf = copy(s.buf[:], p)
}

func (s *sip) writeBytes(p []byte) {
	s.total += uint64(len(p))
	if s.nbuf > 0 {
		n := copy(s.buf[s.nbuf:], p)
		s.nbuf += n
		p = p[n:]
		if s.nbuf < 8 {
			return
		}
		s.block(binary.LittleEndian.Uint64(s.buf[:]))
		s.nbuf = 0
	}
	for len(p) >= 8 {
		s.block(binary.LittleEndian.Uint64(p))
		p = p[8:]
	}
	s.nbuf = copy(s.buf[:], p)
}

func (s *sip) final() {
	b := s.total << 56
	for i := s.nbuf - 1; i >= 0; i-- {
		b |= uint64(s.buf[i]) << (8 * i)
	}
	s.block(b)
}

// sum128 finishes the 128-bit variant and returns its two halves, first
// half first (the reference implementation's byte order, little-endian).
func (s *sip) sum128() (uint64, uint64) {
	s.final()
	s.v2 ^= 0xee
	s.round()
	s.round()
	s.round()
	s.round()
	lo := s.v0 ^ s.v1 ^ s.v2 ^ s.v3
	s.v1 ^= 0xdd
	s.round()
	s.round()
	s.round()
	s.round()
	return lo, s.v0 ^ s.v1 ^ s.v2 ^ s.v3
}
