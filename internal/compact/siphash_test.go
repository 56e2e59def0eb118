package compact

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// TestSipHash128Vectors checks the reference implementation's vectors
// (vectors_sip128, key 00..0f, message 00..len-1), fed in one piece and
// byte by byte through both write paths.
func TestSipHash128Vectors(t *testing.T) {
	t.Parallel()
	var k Key
	for i := range k {
		k[i] = byte(i)
	}
	for n, want := range []string{
		"a3817f04ba25a8e66df67214c7550293",
		"da87c1d86b99af44347659119b22fc45",
		"8177228da4a45dc7fca38bdef60affe4",
	} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(i)
		}
		for _, split := range []bool{false, true} {
			var s sip
			s.init(&k)
			if split {
				for i := range msg {
					if i%2 == 0 {
						s.writeBytes(msg[i : i+1])
					} else {
						s.writeString(string(msg[i : i+1]))
					}
				}
			} else {
				s.writeBytes(msg)
			}
			lo, hi := s.sum128()
			if l2, h2 := sum128(&k, msg); l2 != lo || h2 != hi {
				t.Errorf("len %d: one-pass %x %x, streaming %x %x", n, l2, h2, lo, hi)
			}
			var out [16]byte
			binary.LittleEndian.PutUint64(out[:8], lo)
			binary.LittleEndian.PutUint64(out[8:], hi)
			if got := hex.EncodeToString(out[:]); got != want {
				t.Errorf("len %d split %v: %s, want %s", n, split, got, want)
			}
		}
	}
}

// TestSumSeparatesScopeFromID checks that moving bytes between scope and id
// changes the fingerprint, and that keys give independent fingerprints.
func TestSumSeparatesScopeFromID(t *testing.T) {
	t.Parallel()
	k := NewKey()
	seen := map[FP]string{}
	for _, p := range [][2]string{{"ab", "c"}, {"a", "bc"}, {"abc", ""}, {"", "abc"}, {"", ""}, {"0123456789abcdef", "0123456789abcdef-x"}} {
		fp := k.Sum(p[0], p[1])
		if prev, ok := seen[fp]; ok {
			t.Fatalf("%q and %q share a fingerprint", prev, p)
		}
		seen[fp] = p[0] + "|" + p[1]
	}
	k2 := NewKey()
	if k.Sum("s", "id") == k2.Sum("s", "id") {
		t.Fatal("two random keys gave the same fingerprint")
	}
}

// TestSumPathsAgree checks that the one-pass path for short inputs and the
// streaming path give the same fingerprint, at every length around the
// switch between them.
func TestSumPathsAgree(t *testing.T) {
	t.Parallel()
	k := NewKey()
	long := make([]byte, 300)
	for i := range long {
		long[i] = byte(i * 7)
	}
	for n := 0; n <= len(long); n++ {
		for _, cut := range []int{0, n / 3, n} {
			scope, id := string(long[:cut]), string(long[cut:n])
			var s sip
			s.init(&k)
			var v [10]byte
			s.writeBytes(v[:binary.PutUvarint(v[:], uint64(len(scope)))])
			s.writeString(scope)
			s.writeString(id)
			lo, hi := s.sum128()
			if got := k.Sum(scope, id); got != (FP{Lo: lo, Hi: uint32(hi)}) {
				t.Fatalf("len %d cut %d: Sum %v, streaming %x %x", n, cut, got, lo, hi)
			}
		}
	}
}
