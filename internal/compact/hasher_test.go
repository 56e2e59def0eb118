package compact

import (
	"crypto/aes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
)

var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// formatUUID writes u in the canonical form, independently of ParseUUID.
func formatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func TestParseUUID(t *testing.T) {
	t.Parallel()
	for range 1000 {
		u := uuid.New()
		got, ok := ParseUUID(u.String())
		if !ok || got != [16]byte(u) {
			t.Fatalf("ParseUUID(%s) = %x, %v", u, got, ok)
		}
	}
	for _, s := range []string{"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "0123abcd-4567-89ef-0123-456789abcdef"} {
		if _, ok := ParseUUID(s); !ok {
			t.Errorf("ParseUUID(%q) refused a canonical UUID", s)
		}
	}
	good := "0123abcd-4567-89ef-0123-456789abcdef"
	bad := []string{
		"", strings.ToUpper(good), "0123ABCD-4567-89ef-0123-456789abcdef", good[:35], good + "0",
		"{" + good[:35], "0123abcd04567-89ef-0123-456789abcdef", "0123abcd-4567-89ef-0123-456789abcde-",
		"0123abcd-4567-89ef-0123_456789abcdef", "0123abcd4567-89ef-0123-456789abcdef0", "urn:uuid:" + good,
		"0123abcd-4567-89ef-0123-456789abcdeg", "0123abcd-4567-89ef-0123-456789abcde\x00", "g123abcd-4567-89ef-0123-456789abcdef",
		"0123abcd-4567-89ef-0123-456789abcd\xc3\xa9", strings.ReplaceAll(good, "-", ""),
	}
	// Every single-byte change of a canonical UUID to a character that is
	// not a lowercase digit (in a digit position) or not '-' (in a hyphen
	// position) is refused.
	for i := range len(good) {
		for c := range 256 {
			b := []byte(good)
			b[i] = byte(c)
			if !canonicalUUID.Match(b) {
				bad = append(bad, string(b))
			}
		}
	}
	for _, s := range bad {
		if u, ok := ParseUUID(s); ok {
			t.Errorf("ParseUUID(%q) = %x, accepted a non-canonical id", s, u)
		}
	}
}

// FuzzParseUUID checks that ParseUUID never panics, accepts exactly the
// canonical form, and that what it accepts formats back to the input.
func FuzzParseUUID(f *testing.F) {
	f.Add("0123abcd-4567-89ef-0123-456789abcdef")
	f.Add("0123ABCD-4567-89EF-0123-456789ABCDEF")
	f.Add("0123abcd-4567-89ef-0123-456789abcdeg")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		u, ok := ParseUUID(s)
		if ok != canonicalUUID.MatchString(s) {
			t.Fatalf("ParseUUID(%q) ok = %v, canonical = %v", s, ok, !ok)
		}
		if ok && formatUUID(u) != s {
			t.Fatalf("ParseUUID(%q) = %x, which formats as %s", s, u, formatUUID(u))
		}
	})
}

// TestHasherPaths checks which ids take which path, that the AES path is
// AES-128 of the UUID XOR the scope mask under the derived keys, and that
// a Hasher made again from the same Key gives the same fingerprints.
func TestHasherPaths(t *testing.T) {
	t.Parallel()
	k := NewKey()
	h := NewHasher(k)
	again := NewHasher(k)
	sip := NewSipHasher(k)
	if h.Key() != k || !h.UUIDPath() || sip.UUIDPath() {
		t.Fatal("Key or UUIDPath wrong")
	}
	aesKey := k.derive("aes-128 key for canonical UUIDs")
	maskKey := k.derive("siphash key for the scope masks")
	if aesKey == k || maskKey == k || aesKey == maskKey {
		t.Fatal("derived keys repeat")
	}
	block, err := aes.NewCipher(aesKey[:])
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		scope := fmt.Sprintf("scope-%d", i%3)
		u := uuid.New()
		id := u.String()
		// The AES path, computed here from its definition.
		mlo, mhi := sumParts(&maskKey, 0, 0, scope, "")
		var in, out [16]byte
		binary.LittleEndian.PutUint64(in[:8], binary.LittleEndian.Uint64(u[:8])^mlo)
		binary.LittleEndian.PutUint64(in[8:], binary.LittleEndian.Uint64(u[8:])^mhi)
		block.Encrypt(out[:], in[:])
		want := FP{Lo: binary.LittleEndian.Uint64(out[:8]), Hi: binary.LittleEndian.Uint32(out[8:12])}
		if got := h.Sum(scope, id); got != want {
			t.Fatalf("Sum(%q, %s) = %v, want AES path %v", scope, id, got, want)
		}
		if got := again.Sum(scope, id); got != want {
			t.Fatalf("a second Hasher of the same key: %v, want %v", got, want)
		}
		if h.Sum(scope, id) == k.Sum(scope, id) {
			t.Fatalf("Sum(%q, %s) equals the SipHash path", scope, id)
		}
		// Uppercase, braces, a missing hyphen: the SipHash path.
		for _, other := range []string{strings.ToUpper(id), "{" + id + "}", strings.Replace(id, "-", "", 1), id[:35]} {
			if got, want := h.Sum(scope, other), k.Sum(scope, other); got != want {
				t.Fatalf("Sum(%q, %q) = %v, want Key.Sum %v", scope, other, got, want)
			}
		}
		if got, want := sip.Sum(scope, id), k.Sum(scope, id); got != want {
			t.Fatalf("SipHasher: %v, want %v", got, want)
		}
	}
}

// TestHasherScopes checks that one UUID in different scopes (including
// scopes whose bytes differ by one, and the empty scope) gets different
// fingerprints, and that the mask cache gives the right mask when
// goroutines alternate scopes concurrently.
func TestHasherScopes(t *testing.T) {
	t.Parallel()
	h := NewHasher(NewKey())
	scopes := []string{"", "a", "b", "orders", "orders\x00", "Orders", "orders/eu", strings.Repeat("x", 300)}
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	want := map[[2]string]FP{}
	seen := map[FP][2]string{}
	for _, s := range scopes {
		for _, id := range ids {
			fp := h.Sum(s, id)
			if prev, ok := seen[fp]; ok {
				t.Fatalf("%q and %q share fingerprint %v", prev, [2]string{s, id}, fp)
			}
			seen[fp] = [2]string{s, id}
			want[[2]string{s, id}] = fp
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				s, id := scopes[(i+g)%len(scopes)], ids[(i*7+g)%len(ids)]
				if got := h.Sum(s, id); got != want[[2]string{s, id}] {
					t.Errorf("concurrent Sum(%q, %s) = %v, want %v", s, id, got, want[[2]string{s, id}])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestHasherAllocs bounds the UUID path's allocations while the scope
// repeats: one 16-byte block buffer a Sum, none with a buffer passed in,
// and checks that both give the same fingerprint.
func TestHasherAllocs(t *testing.T) {
	h := NewHasher(NewKey())
	id := uuid.NewString()
	if n := testing.AllocsPerRun(1000, func() { h.Sum("orders", id) }); n > 1 {
		t.Errorf("Sum of a UUID allocates %v times", n)
	}
	buf := new([16]byte)
	if n := testing.AllocsPerRun(1000, func() { h.SumBuf("orders", id, buf) }); n > 0 {
		t.Errorf("SumBuf of a UUID allocates %v times", n)
	}
	if h.SumBuf("orders", id, buf) != h.Sum("orders", id) {
		t.Error("SumBuf and Sum differ")
	}
	if n := testing.AllocsPerRun(1000, func() { h.Sum("orders", "not-a-uuid") }); n > 0 {
		t.Errorf("Sum of another id allocates %v times", n)
	}
}
