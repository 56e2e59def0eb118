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
// is hashed first, so ("ab", "c") and ("a", "bc") are different inputs.
func (k *Key) Sum(scope, id string) FP {
	if len(scope)+len(id) <= shortLen {
		// The common case, ids and scopes of tens of bytes: one pass over
		// a stack copy instead of the streaming writer.
		var buf [shortLen + binary.MaxVarintLen64]byte
		n := binary.PutUvarint(buf[:], uint64(len(scope)))
		n += copy(buf[n:], scope)
		n += copy(buf[n:], id)
		lo, hi := sum128(k, buf[:n])
		return FP{Lo: lo, Hi: uint32(hi)}
	}
	var s sip
	s.init(k)
	var n [binary.MaxVarintLen64]byte
	s.writeBytes(n[:binary.PutUvarint(n[:], uint64(len(scope)))])
	s.writeString(scope)
	s.writeString(id)
	lo, hi := s.sum128()
	return FP{Lo: lo, Hi: uint32(hi)}
}

const shortLen = 240

// sum128 is SipHash-2-4-128 of p in one pass.
func sum128(k *Key, p []byte) (uint64, uint64) {
	var s sip
	s.init(k)
	s.total = uint64(len(p))
	for len(p) >= 8 {
		s.block(binary.LittleEndian.Uint64(p))
		p = p[8:]
	}
	s.nbuf = copy(s.buf[:], p)
	return s.sum128()
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
