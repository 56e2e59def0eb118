package diskwindow

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func randVals(r *rand.Rand, n int, f uint) []u128 {
	vals := make([]u128, n)
	for i := range vals {
		vals[i] = u128{hi: r.Uint64(), lo: r.Uint64()}.low(f)
	}
	return vals
}

// TestGenRoundTrip writes generations of many sizes and widths and finds
// every value in them and no absent one.
func TestGenRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, f := range []uint{64, 85, 96} {
		for _, n := range []int{1, 2, 3, 31, 100, 513, 4096, 70000} {
			dir := t.TempDir()
			vals := randVals(r, n, f)
			if n > 3 {
				vals[1] = vals[0] // equal fingerprints are allowed
				vals[2] = u128{}.low(f)
				vals[3] = u128{^uint64(0), ^uint64(0)}.low(f)
			}
			want := append([]u128(nil), vals...)
			path, err := writeGen(dir, 7, f, 42, vals, 10, 20)
			if err != nil {
				t.Fatal(err)
			}
			g, err := openGen(path, f, 42, true)
			if err != nil {
				t.Fatalf("f=%d n=%d: %v", f, n, err)
			}
			for i, v := range want {
				if ok, err := g.has(v); !ok || err != nil {
					t.Fatalf("f=%d n=%d: value %d not found (%v)", f, n, i, err)
				}
			}
			miss := 0
			for range 2000 {
				v := u128{hi: r.Uint64(), lo: r.Uint64()}.low(f)
				if ok, _ := g.has(v); ok {
					t.Fatalf("f=%d n=%d: absent value found", f, n)
				}
				if g.maybe(v) {
					miss++
				}
			}
			if n >= 4096 && miss > 2000/8 {
				t.Errorf("f=%d n=%d: %d of 2000 absent values pass the in-memory filter", f, n, miss)
			}
			if st, _ := os.Stat(path); n >= 70000 && float64(st.Size())/float64(n) > float64(f+3)/8 {
				t.Errorf("f=%d n=%d: %.2f bytes an id", f, n, float64(st.Size())/float64(n))
			}
			g.close()
		}
	}
}

// TestGenDamage flips every region of a file and checks it is refused by
// name, at open or by the lookup that reads the damaged block.
func TestGenDamage(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	vals := randVals(r, 20000, 85)
	want := append([]u128(nil), vals...)
	path, err := writeGen(dir, 1, 85, 9, vals, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(path)
	l := newLayout(20000, 85, midBitsFor(20000), 1)
	for _, off := range []uint64{0, 9, 13, 30, 75, 81, genHeaderLen + 3, l.metaLen - 2, l.lowOff + 5, l.total - 1} {
		b := append([]byte(nil), orig...)
		b[off] ^= 0x10
		p := filepath.Join(dir, "damaged.edf")
		os.WriteFile(p, b, 0o600)
		g, err := openGen(p, 85, 9, false)
		if err == nil {
			for _, v := range want {
				if _, err = g.has(v); err != nil {
					break
				}
			}
			g.close()
		}
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != p || !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: %v, want a CorruptError naming %s", off, err, p)
		}
	}
	for _, cut := range []int{0, 10, genHeaderLen, len(orig) - 1} {
		p := filepath.Join(dir, "short.edf")
		os.WriteFile(p, orig[:cut], 0o600)
		if _, err := openGen(p, 85, 9, false); !errors.Is(err, ErrCorrupt) {
			t.Errorf("cut to %d bytes: %v", cut, err)
		}
	}
	if _, err := openGen(path, 85, 10, false); !errors.Is(err, ErrCorrupt) {
		t.Errorf("another key: %v", err)
	}
}

// FuzzGenDecode opens arbitrary bytes as a generation: it must refuse
// them or answer lookups, never panic, and allocate no more than the
// file's size.
func FuzzGenDecode(f *testing.F) {
	dir := f.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 5, 600} {
		path, err := writeGen(dir, 1, 64, 0, randVals(r, n, 64), 0, 0)
		if err != nil {
			f.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		f.Add(b)
	}
	// A merged file: three generations, two tag bits a value.
	tags := []genTag{{1, 0, 1, 2}, {2, 1, 2, 300}, {3, 2, 3, 5}}
	vals := randVals(r, 307, 64)
	slices.SortFunc(vals, func(a, b u128) int { return cmpU128(a, b) })
	path, rd, err := writeRun(dir, 64, 0, tags, func(put func(u128, uint64) error) error {
		for i, v := range vals {
			if err := put(v, uint64(i%3)); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if err == nil {
		rd.Close()
	}
	b, _ := os.ReadFile(path)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.edf")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		g, err := openGen(p, 64, 0, true)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("not a CorruptError: %v", err)
			}
			return
		}
		defer g.close()
		if g.memBytes() > 2*len(b)+3*blockSize {
			t.Fatalf("%d bytes in memory for a %d-byte file", g.memBytes(), len(b))
		}
		rr := rand.New(rand.NewPCG(uint64(len(b)), 0))
		for range 100 {
			g.has(u128{lo: rr.Uint64()})
		}
		// Read in full, as a merge does: values in order, or an error.
		it := newGenIter(g, g.file)
		var prev u128
		for i := uint64(0); ; i++ {
			v, _, ok, err := it.next()
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("not a CorruptError: %v", err)
				}
				break
			}
			if !ok {
				if i != g.n {
					t.Fatalf("%d values of %d", i, g.n)
				}
				break
			}
			if v.less(prev) {
				t.Fatalf("value %d out of order", i)
			}
			prev = v
		}
	})
}
