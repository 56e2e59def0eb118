package compact

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
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

// Sum returns the fingerprint of (scope, id).
func (h *Hasher) Sum(scope, id string) FP {
	if h.fast {
		if u, ok := ParseUUID(id); ok {
			return h.sumUUID(scope, &u)
		}
	}
	return h.key.Sum(scope, id)
}

// sumUUID encrypts u XOR the scope's mask and keeps 96 bits of it.
func (h *Hasher) sumUUID(scope string, u *[16]byte) FP {
	m := h.last.Load()
	if m == nil || m.scope != scope {
		lo, hi := sumParts(&h.mask, 0, 0, scope, "")
		m = &scopeMask{scope: scope, lo: lo, hi: hi}
		h.last.Store(m)
	}
	// buf escapes (an interface call): one 16-byte allocation, from the
	// tiny allocator, which is cheaper than a sync.Pool round trip.
	buf := new([16]byte)
	binary.LittleEndian.PutUint64(buf[:8], binary.LittleEndian.Uint64(u[:8])^m.lo)
	binary.LittleEndian.PutUint64(buf[8:], binary.LittleEndian.Uint64(u[8:])^m.hi)
	h.block.Encrypt(buf[:], buf[:])
	return FP{Lo: binary.LittleEndian.Uint64(buf[:8]), Hi: binary.LittleEndian.Uint32(buf[8:12])}
}

// unhex maps a byte to its value as a lowercase hexadecimal digit, or to
// 0xff.
var unhex = func() (t [256]uint8) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = uint8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = uint8(c - 'a' + 10)
	}
	return t
}()

// uuidDigits are the positions of the first digit of each byte of a
// canonical UUID's text.
var uuidDigits = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// ParseUUID parses a canonical UUID text (36 characters: 8-4-4-4-12
// lowercase hexadecimal digits, any version or variant) into its 16 bytes.
// It reports false for anything else, uppercase digits included, so it is
// one to one between the strings it accepts and their bytes.
func ParseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	bad := uint8(0)
	for i, p := range uuidDigits {
		a, b := unhex[s[p]], unhex[s[p+1]]
		bad |= a | b
		u[i] = a<<4 | b
	}
	return u, bad&0xf0 == 0
}
