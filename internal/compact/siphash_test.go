package compact

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// hashSplit is SipHash-2-4-128 of msg through sumParts, msg cut at i and j
// (pre is msg[:i], i ≤ 8), so that every boundary path runs.
func hashSplit(k *Key, msg []byte, i, j int) (uint64, uint64) {
	var pre [8]byte
	copy(pre[:], msg[:i])
	return sumParts(k, binary.LittleEndian.Uint64(pre[:]), i, string(msg[i:j]), string(msg[j:]))
}

// TestSipHash128Vectors checks the reference implementation's vectors
// (vectors_sip128, key 00..0f, message 00..len-1), with the message cut at
// every pair of points.
func TestSipHash128Vectors(t *testing.T) {
	t.Parallel()
	var k Key
	for i := range k {
		k[i] = byte(i)
	}
	for n, want := range map[int]string{
		0:  "a3817f04ba25a8e66df67214c7550293",
		1:  "da87c1d86b99af44347659119b22fc45",
		2:  "8177228da4a45dc7fca38bdef60affe4",
		8:  "3b62a9ba6258f5610f83e264f31497b4",
		15: "5493e99933b0a8117e08ec0f97cfc3d9",
		16: "6ee2a4ca67b054bbfd3315bf85230577",
		63: "5150d1772f50834a503e069a973fbd7c",
	} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(i)
		}
		for i := 0; i <= min(n, 8); i++ {
			for j := i; j <= n; j++ {
				lo, hi := hashSplit(&k, msg, i, j)
				var out [16]byte
				binary.LittleEndian.PutUint64(out[:8], lo)
				binary.LittleEndian.PutUint64(out[8:], hi)
				if got := hex.EncodeToString(out[:]); got != want {
					t.Errorf("len %d cut %d,%d: %s, want %s", n, i, j, got, want)
				}
			}
		}
	}
}

// TestSumPathsAgree checks that Sum equals the hash of the whole message
// uvarint(len(scope)) ‖ scope ‖ id however it is cut, at every length up
// to a few words and every cut.
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
			msg := binary.AppendUvarint(nil, uint64(len(scope)))
			msg = append(append(msg, scope...), id...)
			for _, i := range []int{0, 1, min(8, len(msg))} {
				for _, j := range []int{i, (i + len(msg)) / 2, len(msg)} {
					lo, hi := hashSplit(&k, msg, i, j)
					if got := k.Sum(scope, id); got != (FP{Lo: lo, Hi: uint32(hi)}) {
						t.Fatalf("len %d cut %d split %d,%d: Sum %v, whole %x %x", n, cut, i, j, got, lo, hi)
					}
				}
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
