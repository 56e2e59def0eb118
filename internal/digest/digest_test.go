package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/idem-go/idem/internal/uuidtext"
	"github.com/idem-go/idem/sqldialect"
)

// The digests are stored: these pin their definitions.
func TestSumIsSHA256Cut(t *testing.T) {
	t.Parallel()
	salt, name := []byte("0123456789abcdef"), []byte("scope\x00key")
	full := sha256.Sum256(append(append([]byte(nil), salt...), name...))
	if got := Sum(salt, name); !bytes.Equal(got[:], full[:16]) {
		t.Fatalf("Sum = %x, want %x", got, full[:16])
	}
	if Sum(salt, []byte("scope\x00"), []byte("key")) != Sum(salt, name) {
		t.Fatal("Sum of parts differs from Sum of their concatenation")
	}
}

func TestScoped(t *testing.T) {
	t.Parallel()
	salt := []byte("0123456789abcdef")
	p := binary.AppendUvarint(append([]byte(nil), salt...), 3)
	full := sha256.Sum256(append(p, "abcevt-1"...))
	if got := Scoped(salt, "abc", "evt-1"); !bytes.Equal(got[:], full[:16]) {
		t.Fatalf("Scoped = %x, want %x", got, full[:16])
	}
	k := "01890a5d-ac96-774b-bcce-b302099a8057" // UUIDv7
	got := Scoped(salt, "abc", k)
	if !bytes.Equal(got[:6], []byte{0x01, 0x89, 0x0a, 0x5d, 0xac, 0x96}) {
		t.Fatalf("Scoped(UUIDv7) = %x: want its time first", got)
	}
	if _, ok := UUIDv7Millis("01890a5d-ac96-474b-bcce-b302099a8057"); ok {
		t.Fatal("a UUIDv4 read as a UUIDv7")
	}
}

func TestParamParseText(t *testing.T) {
	t.Parallel()
	d := Sum([]byte("s"), []byte("n"))
	if p, ok := Param(sqldialect.SQLite, d).([]byte); !ok || !bytes.Equal(p, d[:]) {
		t.Fatalf("SQLite param %v", Param(sqldialect.SQLite, d))
	}
	s, ok := Param(sqldialect.Postgres, d).(string)
	if !ok || s != uuidtext.Format(d) {
		t.Fatalf("PostgreSQL param %v", Param(sqldialect.Postgres, d))
	}
	if back, err := ParseText(s); err != nil || back != d {
		t.Fatalf("ParseText(%s) = %x, %v", s, back, err)
	}
	for _, bad := range []string{"", "xyz", "0123456789abcdef0123456789abcdeg"} {
		if _, err := ParseText(bad); err == nil {
			t.Errorf("ParseText(%q) accepted", bad)
		}
	}
}

// The meta table's SQL is what tables already made hold: pinned.
func TestMetaTableAndLiteral(t *testing.T) {
	t.Parallel()
	salt := []byte{0x01, 0xab}
	for _, c := range []struct {
		d          sqldialect.Dialect
		table, lit string
	}{
		{sqldialect.Postgres, "CREATE TABLE IF NOT EXISTS m (name text PRIMARY KEY, value bytea NOT NULL)", `'\x01ab'::bytea`},
		{sqldialect.SQLite, "CREATE TABLE IF NOT EXISTS m (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID", `x'01ab'`},
		{sqldialect.MySQL, "CREATE TABLE IF NOT EXISTS m (name VARBINARY(64) NOT NULL PRIMARY KEY, value VARBINARY(255) NOT NULL) ENGINE=InnoDB", `X'01ab'`},
	} {
		if got := MetaTable(c.d, "m"); got != c.table {
			t.Errorf("%v: MetaTable = %s", c.d, got)
		}
		if got := Literal(c.d, salt); got != c.lit {
			t.Errorf("%v: Literal = %s", c.d, got)
		}
	}
	if len(NewSalt()) != SaltLen || bytes.Equal(NewSalt(), NewSalt()) {
		t.Fatal("NewSalt: want 16 fresh random bytes")
	}
}
