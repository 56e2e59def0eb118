package runs

import (
	"crypto/rand"
	"testing"
)

// TestRunBloom: a blocked filter never forgets a key and its false
// "maybe"s stay near the design's rate.
func TestRunBloom(t *testing.T) {
	const n = 200_000
	f := &runFilter{}
	var in [][16]byte
	for range n {
		var d [16]byte
		_, _ = rand.Read(d[:])
		f.add(d)
		in = append(in, d)
	}
	for _, d := range in {
		if !f.mayContain(d) {
			t.Fatal("a key added is not found")
		}
	}
	fp := 0
	for range n {
		var d [16]byte
		_, _ = rand.Read(d[:])
		if f.mayContain(d) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 0.003 {
		t.Fatalf("false maybe rate %.4f over %d parts", rate, len(f.parts))
	}
}
