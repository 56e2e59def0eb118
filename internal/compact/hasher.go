package compact

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math/bits"
	"sync/atomic"
)

// Hasher computes the fingerprints of a Set's ids under a Key, as
// [Key.Sum] does, except that an id written as a canonical UUID (36
// characters, 8-4-4-4-12 lowercase hexadecimal digits) takes a faster
// path: its 16 bytes, XORed with a secret mask of the scope, encrypted
// with AES-128 under a key derived from the Key, cut to 96 bits. Any other
// id, uppercase UUIDs included, is fingerprinted with SipHash as by
// Key.Sum. Why the two paths keep the bound of Key.Sum: the package
// documentation, "Exactness".
//
// The derived keys are computed from the Key, never drawn, so a Hasher
// made again from a snapshot's Key fingerprints every id as before.
//
// A Hasher is safe for concurrent use. It caches the mask of the last
// scope it saw; a caller alternating between scopes recomputes it (one
// SipHash and a 32-byte allocation) at each change.
type Hasher struct {
	key   Key
	fast  bool         // false: every id takes the SipHash path
	block cipher.Block // AES-128 under the derived key
	mask  Key          // SipHash key of the scope masks
	last  atomic.Pointer[scopeMask]
}

// scopeMask is a scope and its 128-bit mask.
type scopeMask struct {
	scope  string
	lo, hi uint64
}

// NewHasher returns a Hasher for k with the UUID path.
func NewHasher(k Key) *Hasher {
	h := &Hasher{key: k, fast: true}
	aesKey := k.derive("aes-128 key for canonical UUIDs")
	b, err := aes.NewCipher(aesKey[:])
	if err != nil {
		panic("compact: " + err.Error()) // a 16-byte key is always valid
	}
	h.block = b
	h.mask = k.derive("siphash key for the scope masks")
	return h
}

// NewSipHasher returns a Hasher for k without the UUID path: its Sum is
// k.Sum for every id. For sets filled before the UUID path existed
// (window snapshots of version 1).
func NewSipHasher(k Key) *Hasher { return &Hasher{key: k} }

// Key returns the Key the Hasher was made with.
func (h *Hasher) Key() Key { return h.key }

// UUIDPath reports whether canonical UUIDs take the AES path.
func (h *Hasher) UUIDPath() bool { return h.fast }

// derive returns a 128-bit key derived from k for the purpose named by
// label: SipHash-2-4-128 under k of nine 0xff bytes and the label. No
// input of Key.Sum starts like that (its first bytes are the uvarint of a
// length below 2⁵⁶, at most eight bytes, the last without the
// continuation bit), so a derived key is never a fingerprint.
func (k *Key) derive(label string) Key {
	lo, hi := sumParts(k, ^uint64(0), 8, "\xff", label)
	var d Key
	binary.LittleEndian.PutUint64(d[:8], lo)
	binary.LittleEndian.PutUint64(d[8:], hi)
	return d
}

// Sum returns the fingerprint of (scope, id). On the UUID path it
// allocates 16 bytes (the block buffer escapes through the cipher.Block
// interface); SumBuf and SumUUID with a buffer of the caller's do not.
func (h *Hasher) Sum(scope, id string) FP { return h.SumBuf(scope, id, nil) }

// SumBuf is Sum using buf, if not nil, as the AES block (see SumUUID).
func (h *Hasher) SumBuf(scope, id string, buf *[16]byte) FP {
	if h.fast {
		if u, ok := ParseUUID(id); ok {
			if buf == nil {
				buf = new([16]byte)
			}
			return h.SumUUID(scope, &u, buf)
		}
	}
	return h.key.Sum(scope, id)
}

// SumUUID returns the fingerprint of (scope, id) for an id that
// ParseUUID parsed to u, on a Hasher whose UUIDPath is true, using buf
// (which it overwrites, and which no other goroutine may use meanwhile)
// as the AES block: pass memory already on the heap, such as a field of a
// structure the caller locks, to save Sum's allocation.
func (h *Hasher) SumUUID(scope string, u, buf *[16]byte) FP {
	m := h.last.Load()
	if m == nil || m.scope != scope {
		lo, hi := sumParts(&h.mask, 0, 0, scope, "")
		m = &scopeMask{scope: scope, lo: lo, hi: hi}
		h.last.Store(m)
	}
	binary.LittleEndian.PutUint64(buf[:8], binary.LittleEndian.Uint64(u[:8])^m.lo)
	binary.LittleEndian.PutUint64(buf[8:], binary.LittleEndian.Uint64(u[8:])^m.hi)
	h.block.Encrypt(buf[:], buf[:])
	return FP{Lo: binary.LittleEndian.Uint64(buf[:8]), Hi: binary.LittleEndian.Uint32(buf[8:12])}
}

// ParseUUID parses a canonical UUID text (36 characters: 8-4-4-4-12
// lowercase hexadecimal digits, any version or variant) into its 16 bytes.
// It reports false for anything else, uppercase digits included, so it is
// one to one between the strings it accepts and their bytes.
func ParseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	// Eight digits a word: the first group, the second and third, the
	// fourth and the start of the fifth, the rest of the fifth.
	a, okA := hex8(le64(s[0:8]))
	b, okB := hex8(uint64(le32(s[9:13])) | uint64(le32(s[14:18]))<<32)
	c, okC := hex8(uint64(le32(s[19:23])) | uint64(le32(s[24:28]))<<32)
	d, okD := hex8(le64(s[28:36]))
	binary.BigEndian.PutUint32(u[0:], a)
	binary.BigEndian.PutUint32(u[4:], b)
	binary.BigEndian.PutUint32(u[8:], c)
	binary.BigEndian.PutUint32(u[12:], d)
	return u, okA && okB && okC && okD
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// hex8 decodes eight lowercase hexadecimal digits, the first in the lowest
// byte of x, into the 32-bit number they write (first digit highest), and
// reports whether all eight are digits. Each byte is checked against the
// ranges '0'–'9' and 'a'–'f' at once (SWAR): with no byte's high bit set,
// adding 0x80−lo to every byte sets a byte's high bit exactly when the
// byte is at least lo, and no carry crosses into the next byte.
func hex8(x uint64) (uint32, bool) {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	geDigit := (x + (0x80-'0')*ones) & high
	gtDigit := (x + (0x80-'9'-1)*ones) & high
	geLetter := (x + (0x80-'a')*ones) & high
	gtLetter := (x + (0x80-'f'-1)*ones) & high
	letter := geLetter &^ gtLetter
	valid := x&high == 0 && (geDigit&^gtDigit|letter) == high
	n := x&(0x0f*ones) + (letter>>7)*9 // each byte its digit's value
	// Pairs of digits to bytes (first digit high), then the four bytes
	// side by side.
	n = (n&0x00ff00ff00ff00ff)<<4 | (n>>8)&0x00ff00ff00ff00ff
	n = (n | n>>8) & 0x0000ffff0000ffff
	n = (n | n>>16) & 0xffffffff
	// The first digit pair is now the lowest byte: make it the highest.
	return bits.ReverseBytes32(uint32(n)), valid
}
