package digest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/idem-go/idem/internal/uuidtext"
	"github.com/idem-go/idem/sqldialect"
)

// SaltLen is the length of a new table's salt.
const SaltLen = 16

// NewSalt returns a fresh random salt.
func NewSalt() []byte {
	s := make([]byte, SaltLen)
	_, _ = rand.Read(s)
	return s
}

// Sum is the first 16 bytes of SHA-256 over salt followed by the parts.
func Sum(salt []byte, parts ...[]byte) [16]byte {
	h := sha256.New()
	h.Write(salt)
	for _, p := range parts {
		h.Write(p)
	}
	var b [sha256.Size]byte
	var d [16]byte
	copy(d[:], h.Sum(b[:0]))
	return d
}

// Scoped is the inbox's digest of key under scope: SHA-256 of the salt,
// the scope's length (uvarint), the scope and the key. When the key is a
// canonical UUIDv7, its 48-bit millisecond time replaces the first 6
// bytes, so that time-ordered keys stay ordered in a B-tree (appends at
// its right edge) and 80 bits of the hash remain.
func Scoped(salt []byte, scope, key string) [16]byte {
	var buf [SaltLen + binary.MaxVarintLen64 + 2*255]byte
	p := append(buf[:0], salt...)
	p = binary.AppendUvarint(p, uint64(len(scope)))
	p = append(p, scope...)
	p = append(p, key...)
	sum := sha256.Sum256(p)
	var d [16]byte
	copy(d[:], sum[:16])
	if ms, ok := UUIDv7Millis(key); ok {
		var t [8]byte
		binary.BigEndian.PutUint64(t[:], ms)
		copy(d[:6], t[2:])
		copy(d[6:], sum[:10])
	}
	return d
}

// UUIDv7Millis returns the millisecond time of a canonical UUIDv7 text.
func UUIDv7Millis(k string) (uint64, bool) {
	if len(k) != 36 || k[8] != '-' || k[13] != '-' || k[18] != '-' || k[23] != '-' || k[14] != '7' {
		return 0, false
	}
	switch k[19] {
	case '8', '9', 'a', 'b', 'A', 'B':
	default:
		return 0, false
	}
	var ms uint64
	for _, c := range []byte(k[:8] + k[9:13]) {
		v, ok := hexVal(c)
		if !ok {
			return 0, false
		}
		ms = ms<<4 | uint64(v)
	}
	return ms, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Param is d as the driver binds it: uuid text on PostgreSQL (whose column
// is a uuid: 16 bytes with no length header), bytes elsewhere.
func Param(dl sqldialect.Dialect, d [16]byte) any {
	if dl == sqldialect.Postgres {
		return uuidtext.Format(d)
	}
	return d[:]
}

// ParseText reads back a digest that PostgreSQL returns as d::text.
func ParseText(s string) ([16]byte, error) {
	var d [16]byte
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return d, fmt.Errorf("digest %q", s)
	}
	for i := range 16 {
		hi, ok1 := hexVal(h[2*i])
		lo, ok2 := hexVal(h[2*i+1])
		if !ok1 || !ok2 {
			return d, fmt.Errorf("digest %q", s)
		}
		d[i] = hi<<4 | lo
	}
	return d, nil
}

// MetaTable creates the table meta of (name, value) rows that holds a
// digest table's salt (and whatever else its layout records there).
func MetaTable(dl sqldialect.Dialect, meta string) string {
	switch dl {
	case sqldialect.Postgres:
		return `CREATE TABLE IF NOT EXISTS ` + meta + ` (name text PRIMARY KEY, value bytea NOT NULL)`
	case sqldialect.MySQL:
		return `CREATE TABLE IF NOT EXISTS ` + meta + ` (name VARBINARY(64) NOT NULL PRIMARY KEY, value VARBINARY(255) NOT NULL) ENGINE=InnoDB`
	}
	return `CREATE TABLE IF NOT EXISTS ` + meta + ` (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID`
}

// Literal is b as an SQL literal of the meta table's value column.
func Literal(dl sqldialect.Dialect, b []byte) string {
	h := hex.EncodeToString(b)
	switch dl {
	case sqldialect.Postgres:
		return `'\x` + h + `'::bytea`
	case sqldialect.MySQL:
		return `X'` + h + `'`
	}
	return `x'` + h + `'`
}
