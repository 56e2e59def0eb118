package bloom

import (
	"crypto/rand"
	"testing"
)

func TestNoFalseAbsent(t *testing.T) {
	t.Parallel()
	f := New(10_000, 16)
	keys := make([][16]byte, 10_000)
	for i := range keys {
		_, _ = rand.Read(keys[i][:])
		f.Add(keys[i])
	}
	for _, k := range keys {
		if !f.MayContain(k) {
			t.Fatalf("%x added, then reported absent", k)
		}
	}
	maybes := 0
	for range 100_000 {
		var k [16]byte
		_, _ = rand.Read(k[:])
		if f.MayContain(k) {
			maybes++
		}
	}
	if maybes > 1_000 { // about 0.1% expected at 16 bits a key; 1% is broken
		t.Fatalf("%d false maybes in 100,000", maybes)
	}
}
