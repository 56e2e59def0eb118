package memstore

import (
	"unsafe"

	"github.com/idem-go/idem/internal/compact"
)

// table is a shard's map tier: its entries, in pages that never move, and
// an index that finds an entry by its key's 96-bit keyed fingerprint (the
// one that picked the shard).
//
// Why this shape (measured on idemhttp's request path, 2026-12-06): the
// index holds no pointers, so the garbage collector neither scans it nor
// marks a key string for each slot, and a lookup hashes the 12-byte
// fingerprint the call computed anyway instead of the key; the key lives
// at the front of its entry's data, one allocation with the request
// fingerprint and the result; the pages are allocated one at a time as the
// table grows, so a full table is never copied into a larger one.
//
// A lookup compares the key stored in the entry, so two keys with one
// fingerprint (about 2⁻⁹⁶ likely for a pair under the store's random key)
// are still told apart: the second is indexed by its key in coll, nil
// until that happens.
type table struct {
	index map[compact.FP]uint32 // nil once the store is closed
	coll  map[string]uint32     // internal keys whose fingerprint another key holds in index
	pages [][]entry
	n     uint32   // slots handed out, in pages
	free  []uint32 // slots handed out and unused
}

// pageBits sets a page's entries (512, 24 KiB).
const pageBits = 9

const pageSize = 1 << pageBits

func newTable() table { return table{index: make(map[compact.FP]uint32)} }

// closed reports whether the store was closed (the table dropped).
func (t *table) closed() bool { return t.index == nil }

// at returns the entry in slot i.
func (t *table) at(i uint32) *entry { return &t.pages[i>>pageBits][i&(pageSize-1)] }

// find returns the slot of the key with internal key prefix+key and
// fingerprint fp. The two parts are compared in place, not joined into a
// buffer on the caller's stack (in a goroutine a message, as Watermill's
// router starts, a larger frame costs the goroutine a stack growth).
func (t *table) find(fp compact.FP, prefix, key string) (uint32, bool) {
	if i, ok := t.index[fp]; ok && t.at(i).is(prefix, key) {
		return i, true
	}
	if len(t.coll) > 0 {
		i, ok := t.coll[prefix+key]
		return i, ok
	}
	return 0, false
}

// add stores e, whose key must be absent, and returns its slot.
func (t *table) add(e entry) uint32 {
	var i uint32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if t.n>>pageBits == uint32(len(t.pages)) {
			t.pages = append(t.pages, make([]entry, pageSize))
		}
		i = t.n
		t.n++
	}
	*t.at(i) = e
	if _, taken := t.index[e.kfp()]; !taken {
		t.index[e.kfp()] = i
	} else {
		if t.coll == nil {
			t.coll = make(map[string]uint32)
		}
		t.coll[e.key()] = i
	}
	return i
}

// remove deletes the entry in slot i.
func (t *table) remove(i uint32) {
	e := t.at(i)
	if j, ok := t.index[e.kfp()]; ok && j == i {
		delete(t.index, e.kfp())
	} else {
		delete(t.coll, e.key())
	}
	*e = entry{} // drop the key, fingerprint and result
	t.free = append(t.free, i)
}

// all yields the slot of every entry, those in the index first, from the
// random place where Go starts a map's iteration. The entry yielded may be
// removed.
func (t *table) all(yield func(uint32) bool) {
	for _, i := range t.index {
		if !yield(i) {
			return
		}
	}
	for _, i := range t.coll {
		if !yield(i) {
			return
		}
	}
}

// entry is one key of the map tier, 48 bytes. Its internal key, request
// fingerprint and result share one string: one allocation, one pointer for
// the garbage collector to follow.
type entry struct {
	data  string // internal key, then fingerprint, then result
	exp   int64  // lease or result expiry, ns since base
	token uint64
	kfpLo uint64 // the key's fingerprint (its place in the index), in
	kfpHi uint32 // two fields so that the struct packs
	klen  uint16 // ≤ 2+keystore.MaxScopeLen+idem.MaxKeyLen
	fpLen uint8  // ≤ idem.MaxFingerprintLen
	state uint8
}

// newEntry is the entry of the key with internal key prefix+key and
// fingerprint kfp, holding the request fingerprint fp and result: one
// allocation, the four copied into it.
func newEntry[F ~string | ~[]byte](prefix, key string, kfp compact.FP, fp F, result []byte, exp int64, token uint64, state uint8) entry {
	k := len(prefix) + len(key)
	b := make([]byte, k+len(fp)+len(result))
	n := copy(b, prefix)
	n += copy(b[n:], key)
	n += copy(b[n:], fp)
	copy(b[n:], result)
	return entry{
		data: unsafe.String(unsafe.SliceData(b), len(b)), // b is not written again
		exp:  exp, token: token, kfpLo: kfp.Lo, kfpHi: kfp.Hi,
		klen: uint16(k), fpLen: uint8(len(fp)), state: state,
	}
}

func (e *entry) kfp() compact.FP { return compact.FP{Lo: e.kfpLo, Hi: e.kfpHi} }
func (e *entry) key() string     { return e.data[:e.klen] }

// is reports whether e is the key with internal key prefix+key.
func (e *entry) is(prefix, key string) bool {
	k := e.key()
	return len(k) == len(prefix)+len(key) && k[:len(prefix)] == prefix && k[len(prefix):] == key
}
func (e *entry) fp() string     { return e.data[e.klen : int(e.klen)+int(e.fpLen)] }
func (e *entry) value() string  { return e.data[e.klen:] } // fingerprint and result
func (e *entry) result() []byte { return []byte(e.data[int(e.klen)+int(e.fpLen):]) }

// size is the bytes of fingerprint and result (what WithMaxBytes counts).
func (e *entry) size() int { return len(e.data) - int(e.klen) }
