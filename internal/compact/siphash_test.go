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
