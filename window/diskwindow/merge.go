package diskwindow

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"os"
	"sync/atomic"
)

// Merging sealed files. Each sealed file costs every new id one probe of
// its in-memory part (a few cache misses), so a set of many generations
// (the seeds' day: 24 hourly ones) would spend most of a new id's time on
// them. Instead the newest two files are merged into one, in the
// background, whenever they fit one file (under maxGenIDs ids, at most
// maxTags generations): a run, whose values carry tags naming their
// generation, so that each generation still expires on its own. A new id
// then probes one file for every 2³² ids, whatever the number of
// generations. A merge drops the values of the generations already
// expired, and a file whose expired ids are a quarter of it or more is
// rewritten without them, so expired ids cost at most a third more
// than the live ones.
//
// Crash safety: the merged file is written under a temporary name,
// fsync'd, and renamed over the newest input (both are named after their
// newest generation), then the older input is deleted. A crash in between
// leaves the older input beside a file that covers its generations: Open
// deletes it (superseded).

// pickMerge returns the files to merge now, if any: a file with a quarter
// or more of its ids expired, alone, or else the newest two neighbouring
// files that fit one. Called with mu held.
func (s *Set) pickMerge(cut int64) []*gen {
	for i, g := range s.gens {
		dead, live := g.deadIDs(cut)
		if live > 0 && dead > 0 && 4*dead >= g.n {
			return s.gens[i : i+1]
		}
	}
	for i := len(s.gens) - 1; i >= 1; i-- {
		a, b := s.gens[i-1], s.gens[i]
		deadA, liveA := a.deadIDs(cut)
		deadB, liveB := b.deadIDs(cut)
		if liveA == 0 || liveB == 0 {
			continue // expiry deletes it
		}
		if a.n-deadA+b.n-deadB < maxGenIDs && liveA+liveB <= maxTags {
			return s.gens[i-1 : i+1]
		}
	}
	return nil
}

// maybeMerge starts a merge in the background if one is due and none
// runs, and notes when expiry may make one due. Called with mu held.
func (s *Set) maybeMerge() {
	if s.noMerge || s.merging != nil || s.closed || s.err != nil || s.stopMerge.Load() {
		return
	}
	cut := s.cut()
	s.nextExpiry = math.MaxInt64
	for _, g := range s.gens {
		for _, t := range g.tags {
			if t.tmax > cut {
				s.nextExpiry = min(s.nextExpiry, t.tmax)
			}
		}
	}
	in := s.pickMerge(cut)
	if in == nil {
		return
	}
	in = append([]*gen(nil), in...)
	files := make([]*os.File, 0, len(in))
	for _, g := range in {
		f, err := os.Open(g.path) // its own handle: expiry may close g's
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return
		}
		files = append(files, f)
	}
	done := make(chan struct{})
	s.merging = done
	go func() {
		defer close(done)
		out, err := mergeFiles(s.dir, s.f, s.keyCheck, in, files, cut, &s.stopMerge)
		for _, f := range files {
			f.Close()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.merging = nil
		if err != nil {
			if !errors.Is(err, errStopped) && s.err == nil && !s.closed {
				s.err = err
			}
			return
		}
		s.swap(in, out)
		s.maybeMerge()
	}()
}

// swap puts out, the merge of in, in place of the files of in still open.
// Called with mu held.
func (s *Set) swap(in []*gen, out *gen) {
	if out == nil {
		return // every generation of in had expired
	}
	lo, hi := -1, -1
	for i, g := range s.gens {
		for _, x := range in {
			if g == x {
				if lo < 0 {
					lo = i
				}
				hi = i
			}
		}
	}
	if s.closed || lo < 0 {
		// Closed: the next Open finds out beside what it supersedes.
		// Expired meanwhile (all of in): so is all of out.
		out.close()
		if !s.closed {
			os.Remove(out.path)
		}
		return
	}
	old := append([]*gen(nil), s.gens[lo:hi+1]...)
	s.gens = append(s.gens[:lo], append([]*gen{out}, s.gens[hi+1:]...)...)
	for _, g := range old {
		g.close()
		if g.path != out.path {
			os.Remove(g.path)
		}
	}
}

// waitMerges waits until no merge runs (for tests and Close).
func (s *Set) waitMerges() {
	for {
		s.mu.Lock()
		ch := s.merging
		s.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}

// mergeFiles writes the merge of in (neighbours, oldest first, read
// through files), without the generations expired at cut, as one file
// named after its newest generation, and opens it. It returns nil if
// every generation of in expired. stop interrupts it with errStopped.
func mergeFiles(dir string, f uint, keyCheck uint64, in []*gen, files []*os.File, cut int64, stop *atomic.Bool) (*gen, error) {
	var tags []genTag
	remap := make([][]int, len(in))
	for j, g := range in {
		remap[j] = make([]int, len(g.tags))
		for k, t := range g.tags {
			remap[j][k] = -1
			if t.tmax > cut {
				remap[j][k] = len(tags)
				tags = append(tags, t)
			}
		}
	}
	if len(tags) == 0 {
		return nil, nil
	}
	its := make([]*genIter, len(in))
	for j, g := range in {
		its[j] = newGenIter(g, files[j])
	}
	path, rd, err := writeRun(dir, f, keyCheck, tags, func(put func(v u128, tag uint64) error) error {
		type head struct {
			v   u128
			tag uint64
			ok  bool
		}
		heads := make([]head, len(its))
		for j, it := range its {
			v, tag, ok, err := it.next()
			if err != nil {
				return err
			}
			heads[j] = head{v, tag, ok}
		}
		for {
			j := -1
			for k, h := range heads {
				if h.ok && (j < 0 || h.v.less(heads[j].v)) {
					j = k
				}
			}
			if j < 0 {
				return nil
			}
			if t := remap[j][heads[j].tag]; t >= 0 {
				if err := put(heads[j].v, uint64(t)); err != nil {
					return err
				}
			}
			v, tag, ok, err := its[j].next()
			if err != nil {
				return err
			}
			heads[j] = head{v, tag, ok}
		}
	}, stop)
	if err != nil {
		return nil, err
	}
	g, err := readGen(path, rd, f, keyCheck, false)
	if err != nil {
		rd.Close()
		return nil, err
	}
	return g, nil
}

// genIter reads a sealed file's values and tags in order: the upper and
// mid bits from memory, the low bits and tags from the file, front to
// back, checking each block's checksum.
type genIter struct {
	g      *gen
	r      *bufio.Reader
	win    []byte // low blocks base and base+1 (have of them read)
	base   uint64
	have   uint64
	i      uint64
	w      int
	x      uint64
	L      uint
	stride uint64
}

func newGenIter(g *gen, file *os.File) *genIter {
	it := &genIter{g: g, win: make([]byte, 2*blockSize), L: g.l.f - g.l.u, stride: uint64(g.l.lw + g.l.t)}
	it.r = bufio.NewReaderSize(io.NewSectionReader(file, int64(g.l.lowOff), int64(g.l.lowBytes)), 1<<20)
	if len(g.upper) > 0 {
		it.x = g.upper[0]
	}
	return it
}

// next returns the next value and its tag, or ok false past the last.
func (it *genIter) next() (v u128, tag uint64, ok bool, err error) {
	g := it.g
	if it.i == g.n {
		return u128{}, 0, false, nil
	}
	for it.x == 0 {
		it.w++
		it.x = g.upper[it.w]
	}
	high := uint64(it.w)*64 + uint64(bits.TrailingZeros64(it.x)) - it.i
	it.x &= it.x - 1
	mid := getWords(g.mid, it.i*uint64(g.l.r), g.l.r)
	p := it.i * it.stride
	for p/8/blockSize > it.base {
		// Slide: the first block is passed.
		copy(it.win, it.win[blockSize:])
		it.base++
		if it.have > 0 {
			it.have--
		}
	}
	for (p+it.stride+7)/8 > (it.base+it.have)*blockSize {
		b := it.base + it.have
		dst := it.win[it.have*blockSize : (it.have+1)*blockSize]
		if _, err := io.ReadFull(it.r, dst); err != nil {
			return u128{}, 0, false, &CorruptError{File: g.path, Reason: fmt.Sprintf("low block %d: %v", b, err)}
		}
		if crc32.Checksum(dst, castagnoli) != g.crcs[b] {
			return u128{}, 0, false, &CorruptError{File: g.path, Reason: fmt.Sprintf("low block %d: checksum mismatch", b)}
		}
		it.have++
	}
	low, tag, err := g.lowTag(it.win, p-it.base*blockSize*8)
	if err != nil {
		return u128{}, 0, false, err
	}
	it.i++
	v = u128{lo: high}.lsh(it.L).or(u128{lo: mid}.lsh(g.l.lw)).or(low)
	return v, tag, true, nil
}
