package diskwindow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestMergeFiles merges files of several generations, some expired, and
// reads the result back in order: exactly the live generations' values,
// each with its generation.
func TestMergeFiles(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for _, f := range []uint{64, 85, 96} {
		dir := t.TempDir()
		type tagged struct {
			v   u128
			seq uint64
		}
		var want []tagged
		var in []*gen
		var files []*os.File
		seq := uint64(0)
		for _, sizes := range [][]int{{1, 300, 2}, {5000}, {70, 1, 4096}} {
			var tags []genTag
			var vals []u128
			var tagOf []uint64
			for k, n := range sizes {
				seq++
				tags = append(tags, genTag{seq: seq, tmin: int64(seq) * 10, tmax: int64(seq)*10 + 5, count: uint64(n)})
				for _, v := range randVals(r, n, f) {
					vals = append(vals, v)
					tagOf = append(tagOf, uint64(k))
					if seq > 2 { // generations 1 and 2 expire at cut 25
						want = append(want, tagged{v, seq})
					}
				}
			}
			order := make([]int, len(vals))
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(a, b int) int { return cmpU128(vals[a], vals[b]) })
			path, rd, err := writeRun(dir, f, 42, tags, func(put func(u128, uint64) error) error {
				for _, i := range order {
					if err := put(vals[i], tagOf[i]); err != nil {
						return err
					}
				}
				return nil
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			g, err := readGen(path, rd, f, 42, true)
			if err != nil {
				t.Fatal(err)
			}
			defer g.close()
			in = append(in, g)
			h, _ := os.Open(path)
			defer h.Close()
			files = append(files, h)
		}
		out, err := mergeFiles(dir, f, 42, in, files, 25, new(atomic.Bool))
		if err != nil {
			t.Fatal(err)
		}
		defer out.close()
		if out.seq != seq || len(out.tags) != int(seq)-2 || out.n != uint64(len(want)) {
			t.Fatalf("f=%d: merged file of generation %d, %d tags, %d ids; want %d, %d, %d", f, out.seq, len(out.tags), out.n, seq, seq-2, len(want))
		}
		slices.SortFunc(want, func(a, b tagged) int { return cmpU128(a.v, b.v) })
		h, _ := os.Open(out.path)
		defer h.Close()
		it := newGenIter(out, h)
		for i := 0; ; i++ {
			v, tag, ok, err := it.next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				if i != len(want) {
					t.Fatalf("f=%d: %d values read back, want %d", f, i, len(want))
				}
				break
			}
			if v != want[i].v || out.tags[tag].seq != want[i].seq {
				t.Fatalf("f=%d: value %d is %v of generation %d, want %v of %d", f, i, v, out.tags[tag].seq, want[i].v, want[i].seq)
			}
			if ok, err := out.has(v); !ok || err != nil {
				t.Fatalf("f=%d: merged value %d not found (%v)", f, i, err)
			}
		}
	}
}

func cmpU128(a, b u128) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

// TestMergeSet seals many generations and checks that they end in one
// file that answers as they did, across a restart, and that an expired
// generation inside a merged file answers new, and is dropped from it.
func TestMergeSet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const w = 10 * time.Minute
	s := mustOpen(t, dir, w, WithGenerations(10), WithMaxOpen(400))
	ctx := context.Background()
	ids := func(m int) []string {
		b := make([]string, 1000)
		for i := range b {
			b[i] = fmt.Sprintf("%d-%d", m, i)
		}
		return b
	}
	// One batch a minute for 8 minutes, a generation each (sealed once
	// over WithMaxOpen), merged as they seal.
	for m := range 8 {
		dups, err := s.AddBatch(ctx, "", ids(m), t0.Add(time.Duration(m)*time.Minute), nil)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(dups, true) {
			t.Fatalf("minute %d: a new id answered duplicate", m)
		}
	}
	s.Seal()
	s.waitMerges()
	st := s.Stats()
	if st.Files != 1 || st.Generations < 8 || st.IDs != 8000 {
		t.Fatalf("after merges: %+v, want one file of 8000 ids", st)
	}
	s.Close()
	s = mustOpen(t, dir, w, WithGenerations(10), WithMaxOpen(400))
	defer s.Close()
	now := t0.Add(8 * time.Minute)
	for m := range 8 {
		dups, err := s.SeenBatch(ctx, "", ids(m), now, nil)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(dups, false) {
			t.Fatalf("after restart: an id of minute %d answered new", m)
		}
	}
	// At 10 min + 2.5 min, minutes 0-2 have expired (every generation of
	// theirs sealed within a minute): new again, though still in the file
	// until the rewrite drops them.
	now = t0.Add(12*time.Minute + 30*time.Second)
	for m := range 8 {
		dups, err := s.SeenBatch(ctx, "", ids(m), now, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m <= 1 && slices.Contains(dups, true) || m >= 3 && slices.Contains(dups, false) {
			t.Fatalf("at 12m30s: minute %d answered %v", m, dups[:3])
		}
	}
	s.waitMerges()
	if st := s.Stats(); st.Files != 1 || st.IDs > 6000 {
		t.Fatalf("expired ids not dropped: %+v", st)
	}
}

// unmerged adds the ids 0 to n-1 to a set in dir sealed every maxOpen ids
// and never merged, closes it, and returns its sealed files, oldest first.
func unmerged(t *testing.T, dir string, maxOpen, n int) []string {
	t.Helper()
	s := mustOpen(t, dir, time.Hour, WithMaxOpen(maxOpen), withoutMerge())
	for i := range n {
		add(t, s, "", fmt.Sprint(i), t0)
	}
	s.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.edf"))
	return files
}

// TestMergeLeftover is a crash between a merge's rename and its deletion
// of the older input: Open deletes the input the merged file covers.
func TestMergeLeftover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := unmerged(t, dir, 1000, 2500)
	if len(files) != 2 {
		t.Fatalf("files %v", files)
	}
	older, _ := os.ReadFile(files[0])
	s := mustOpen(t, dir, time.Hour)
	s.waitMerges()
	if st := s.Stats(); st.Files != 1 {
		t.Fatalf("not merged: %+v", st)
	}
	s.Close()
	os.WriteFile(files[0], older, 0o600) // as if the crash came before its deletion
	s = mustOpen(t, dir, time.Hour)
	defer s.Close()
	if _, err := os.Stat(files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("superseded %s kept: %v", files[0], err)
	}
	if st := s.Stats(); st.Files != 1 || st.IDs != 2500 {
		t.Fatalf("after the leftover: %+v", st)
	}
	for i := range 2500 {
		if !add(t, s, "", fmt.Sprint(i), t0) {
			t.Fatalf("id %d answered new", i)
		}
	}
}

// TestMergeDamaged: a damaged block of a file being merged stops the
// merge and breaks the set with a CorruptError naming the file; nothing
// of the file is used, and the files are left as they were.
func TestMergeDamaged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := unmerged(t, dir, 2000, 4500)
	b, _ := os.ReadFile(files[0])
	b[len(b)-100] ^= 1
	os.WriteFile(files[0], b, 0o600)
	s := mustOpen(t, dir, time.Hour) // the index is intact: Open takes it
	defer s.Close()
	s.waitMerges()
	_, err := s.Add(context.Background(), "", "x", t0)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != files[0] {
		t.Fatalf("after merging a damaged file: %v", err)
	}
	if after, _ := filepath.Glob(filepath.Join(dir, "*")); len(after) != len(files)+3 { // SET, LOCK, the journal
		t.Fatalf("files after the failed merge: %v", after)
	}
}

// BenchmarkMerge merges two files of 2²² values each: the CPU a merge
// costs a value (read, compare, written), page cache warm.
func BenchmarkMerge(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	const f, n = 85, 1 << 22
	dir := b.TempDir()
	var in []*gen
	var files []*os.File
	for seq := uint64(1); seq <= 2; seq++ {
		path, err := writeGen(dir, seq, f, 42, randVals(r, n, f), int64(seq), int64(seq))
		if err != nil {
			b.Fatal(err)
		}
		g, err := openGen(path, f, 42, false)
		if err != nil {
			b.Fatal(err)
		}
		defer g.close()
		in = append(in, g)
	}
	out := b.TempDir()
	for b.Loop() {
		files = files[:0]
		for _, g := range in {
			h, err := os.Open(g.path)
			if err != nil {
				b.Fatal(err)
			}
			files = append(files, h)
		}
		g, err := mergeFiles(out, f, 42, in, files, 0, new(atomic.Bool))
		if err != nil {
			b.Fatal(err)
		}
		g.close()
		for _, h := range files {
			h.Close()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*n), "ns/value")
}
