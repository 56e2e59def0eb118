package diskwindow

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"os"
	"sync/atomic"
)

// A sealed generation is one immutable file of the sorted f-bit
// fingerprints of the ids first accepted in a span of time, in an
// Elias–Fano code split in three:
//
//   - upper: the top u = ⌊log₂ n⌋ bits of each value, in unary (value i
//     sets bit high(i)+i): n + 2ᵘ bits, 1.5 to 2 bits an id;
//   - mid: the next r bits of each value, packed (r = 6 when n ≥ 1.25·2ᵘ,
//     else 5: see midBitsFor);
//   - low: the remaining f−u−r bits of each value, then its t tag bits,
//     packed, in blocks of blockSize bytes, each with its own CRC-32C.
//
// A file may hold several generations, merged (a run, see merge.go): its
// tag table lists them, oldest first (sequence, first and last accept,
// count), and each value's t = ⌈log₂ tags⌉ tag bits say which one it came
// from, so that a lookup answers duplicate only for a value whose
// generation has not expired. A file of one generation has t = 0.
//
// Upper and mid (with the block checksums) are read into memory when the
// file is opened, checksummed as a whole: they are the generation's
// filter and index, under 1 byte an id. A lookup finds its bucket in
// upper, compares mid bits in memory, and reads the low bits from disk
// only for an id whose upper and mid bits match one of the file's: a
// false match costs one block read with probability about n/2ᵘ⁺ʳ
// (2⁻⁶ to 2⁻⁴) per file probed for a new id.
//
// Layout, little-endian:
//
//	0   magic "IDEMDWG1"
//	8   version uint32 (2; 1 is read too: no tag table, t = 0)
//	12  f, u, r (mid bits), tags (one byte each)
//	16  sequence of the newest generation uint64 (the file's name)
//	24  n uint64
//	32  tmin, tmax int64: first accept of the oldest and newest id, Unix ns
//	48  upper words, mid words, low bytes uint64
//	72  key check uint64: which set's key fingerprinted the values
//	80  CRC-32C of bytes 0–79 uint32, 0 uint32
//	88  the tag table: per generation, sequence uint64, tmin and tmax
//	    int64, count uint64 (32 bytes; version 2)
//	... upper words, mid words (uint64 each), one CRC-32C uint32 a low
//	    block, then the CRC-32C of every byte from 0 to here
//	... zeros to the next multiple of blockSize: lowOff
//	lowOff  low bytes, zero-padded to whole blocks; the file ends there.
const (
	genMagic     = "IDEMDWG1"
	genVersion   = 2
	genHeaderLen = 88
	tagLen       = 32
	maxTags      = 255
	blockSize    = 4096
	sampleShift  = 9 // one sample every 512 buckets
	// maxGenIDs bounds the ids of one file.
	maxGenIDs = 1 << 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// genTag is one generation of a file: its sequence number, the first
// accepts of its oldest and newest ids (Unix ns), and its count of ids.
type genTag struct {
	seq        uint64
	tmin, tmax int64
	count      uint64
}

// layout is the shape of a file of n f-bit values from ntags
// generations (version 1: ntags 0, read as one).
type layout struct {
	n                               uint64
	f, u, r, lw, t                  uint
	ntags                           int
	upperWords, midWords, lowBytes  uint64
	nblocks, metaLen, lowOff, total uint64
}

func newLayout(n uint64, f, r uint, ntags int) layout {
	l := layout{n: n, f: f, r: r, ntags: ntags}
	l.u = uint(bits.Len64(n)) - 1
	l.lw = f - l.u - l.r
	if ntags > 1 {
		l.t = uint(bits.Len(uint(ntags - 1)))
	}
	l.upperWords = (n + 1<<l.u + 63) / 64
	l.midWords = (n*uint64(l.r) + 63) / 64
	l.lowBytes = (n*uint64(l.lw+l.t) + 7) / 8
	l.lowBytes = (l.lowBytes + blockSize - 1) / blockSize * blockSize
	l.nblocks = l.lowBytes / blockSize
	l.metaLen = genHeaderLen + tagLen*uint64(ntags) + 8*l.upperWords + 8*l.midWords + 4*l.nblocks + 4
	l.lowOff = (l.metaLen + blockSize - 1) / blockSize * blockSize
	l.total = l.lowOff + l.lowBytes
	return l
}

// midBitsFor is the mid bits r a generation of n ids is written with. The
// in-memory part costs 1 + 2ᵘ/n + r bits an id (upper, mid) plus the
// select samples (64 bits every 512 buckets) and the block checksums, and
// a new id passes it falsely with probability n/2ᵘ⁺ʳ. With n ≥ 1.25·2ᵘ
// there is room for a sixth bit under 8 bits (1 byte) an id: at n =
// 1.25·2ᵘ, 1 + 0.8 + 6 + 0.1 + 0.05 = 7.95 bits, and half the false
// matches of r = 5; below that r stays 5 (at most 8 + 0.17 bits at n = 2ᵘ
// otherwise). Files say their r: both are read.
func midBitsFor(n uint64) uint {
	u := uint(bits.Len64(n)) - 1
	if 4*n >= 5<<u {
		return 6
	}
	return 5
}

// gen is an open sealed file: one generation, or a run of several.
type gen struct {
	path       string
	file       *os.File
	seq, n     uint64 // seq: the newest generation's
	tmin, tmax int64
	tags       []genTag
	l          layout
	upper, mid []uint64
	samples    []uint64 // bit position in upper where bucket k<<sampleShift starts
	crcs       []uint32
	touched    uint64 // matchBatch's sum of the words it read ahead
	// One or two low blocks read last, for the lookup that follows.
	buf          []byte
	cached, ncah int64
}

// live reports whether tag's generation still holds live ids at cut: its
// newest id was first accepted after cut.
func (g *gen) live(tag uint64, cut int64) bool { return g.tags[tag].tmax > cut }

// deadIDs counts the ids of the generations expired at cut.
func (g *gen) deadIDs(cut int64) (dead uint64, liveTags int) {
	for _, t := range g.tags {
		if t.tmax > cut {
			liveTags++
		} else {
			dead += t.count
		}
	}
	return dead, liveTags
}

// writeGen writes vals (f-bit values, reordered in place) as generation
// seq in dir, fsyncs it and renames it into place, and returns its path.
func writeGen(dir string, seq uint64, f uint, keyCheck uint64, vals []u128, tmin, tmax int64) (string, error) {
	n := uint64(len(vals))
	if n == 0 || n >= maxGenIDs {
		return "", fmt.Errorf("diskwindow: generation of %d ids", n)
	}
	sortByHigh(vals, f-(uint(bits.Len64(n))-1), uint(bits.Len64(n))-1)
	tags := []genTag{{seq: seq, tmin: tmin, tmax: tmax, count: n}}
	path, rd, err := writeRun(dir, f, keyCheck, tags, func(put func(v u128, tag uint64) error) error {
		for _, v := range vals {
			if err := put(v, 0); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if err != nil {
		return "", err
	}
	rd.Close()
	return path, nil
}

// errStopped ends a merge the Set's Close interrupted.
var errStopped = errors.New("diskwindow: merge stopped")

// writeRun writes the file of the generations tags (oldest first, counts
// summing to n) to dir, under the newest one's name: each calls put with
// the n values in ascending order and their tags (indexes into tags). It
// fsyncs the file and renames it into place, replacing a file of that
// name, and returns its path and the file opened for reading. If stop is set while it writes, it gives up
// with errStopped and leaves nothing.
func writeRun(dir string, f uint, keyCheck uint64, tags []genTag, each func(put func(v u128, tag uint64) error) error, stop *atomic.Bool) (string, *os.File, error) {
	var n uint64
	tmin, tmax := tags[0].tmin, tags[0].tmax
	for _, t := range tags {
		n += t.count
		tmin, tmax = min(tmin, t.tmin), max(tmax, t.tmax)
	}
	if n == 0 || n >= maxGenIDs || len(tags) > maxTags {
		return "", nil, fmt.Errorf("diskwindow: a file of %d ids from %d generations", n, len(tags))
	}
	seq := tags[len(tags)-1].seq
	l := newLayout(n, f, midBitsFor(n), len(tags))
	L := f - l.u
	upper := make([]uint64, l.upperWords)
	mid := make([]uint64, l.midWords)

	path := genPath(dir, seq)
	tmp := path + ".tmp"
	file, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("diskwindow: %w", err)
	}
	fail := func(err error) (string, *os.File, error) {
		file.Close()
		os.Remove(tmp)
		if errors.Is(err, errStopped) {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("diskwindow: writing %s: %w", path, err)
	}
	// The low blocks first, from lowOff, checksummed as they go.
	if _, err := file.Seek(int64(l.lowOff), io.SeekStart); err != nil {
		return fail(err)
	}
	bw := bufio.NewWriterSize(file, 1<<20)
	crcs := make([]uint32, 0, l.nblocks)
	w := lowWriter{block: make([]byte, blockSize), full: func(block []byte) {
		crcs = append(crcs, crc32.Checksum(block, castagnoli))
		bw.Write(block)
	}}
	var i uint64
	var prev u128
	err = each(func(v u128, tag uint64) error {
		if i == n || i > 0 && v.less(prev) || tag >= uint64(len(tags)) {
			return fmt.Errorf("value %d out of order, past %d, or of tag %d of %d", i, n, tag, len(tags))
		}
		if i%(1<<16) == 0 && stop != nil && stop.Load() {
			return errStopped
		}
		p := v.rsh(L).lo + i
		upper[p/64] |= 1 << (p % 64)
		putWords(mid, i*uint64(l.r), l.r, v.rsh(l.lw).lo)
		w.putWide(v.low(l.lw), l.lw)
		w.put(tag, l.t)
		prev = v
		i++
		return nil
	})
	if err == nil && i != n {
		err = fmt.Errorf("%d values, want %d", i, n)
	}
	if err != nil {
		return fail(err)
	}
	w.flush()
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if uint64(len(crcs)) != l.nblocks {
		return fail(fmt.Errorf("%d low blocks, want %d", len(crcs), l.nblocks))
	}
	meta := make([]byte, genHeaderLen, l.metaLen)
	copy(meta, genMagic)
	binary.LittleEndian.PutUint32(meta[8:], genVersion)
	meta[12], meta[13], meta[14], meta[15] = byte(f), byte(l.u), byte(l.r), byte(len(tags))
	binary.LittleEndian.PutUint64(meta[16:], seq)
	binary.LittleEndian.PutUint64(meta[24:], n)
	binary.LittleEndian.PutUint64(meta[32:], uint64(tmin))
	binary.LittleEndian.PutUint64(meta[40:], uint64(tmax))
	binary.LittleEndian.PutUint64(meta[48:], l.upperWords)
	binary.LittleEndian.PutUint64(meta[56:], l.midWords)
	binary.LittleEndian.PutUint64(meta[64:], l.lowBytes)
	binary.LittleEndian.PutUint64(meta[72:], keyCheck)
	binary.LittleEndian.PutUint32(meta[80:], crc32.Checksum(meta[:80], castagnoli))
	for _, t := range tags {
		meta = binary.LittleEndian.AppendUint64(meta, t.seq)
		meta = binary.LittleEndian.AppendUint64(meta, uint64(t.tmin))
		meta = binary.LittleEndian.AppendUint64(meta, uint64(t.tmax))
		meta = binary.LittleEndian.AppendUint64(meta, t.count)
	}
	for _, x := range upper {
		meta = binary.LittleEndian.AppendUint64(meta, x)
	}
	for _, x := range mid {
		meta = binary.LittleEndian.AppendUint64(meta, x)
	}
	for _, c := range crcs {
		meta = binary.LittleEndian.AppendUint32(meta, c)
	}
	meta = binary.LittleEndian.AppendUint32(meta, crc32.Checksum(meta, castagnoli))
	if _, err := file.WriteAt(meta, 0); err != nil {
		return fail(err)
	}
	if err := file.Sync(); err != nil {
		return fail(err)
	}
	if err := file.Close(); err != nil {
		os.Remove(tmp)
		return "", nil, fmt.Errorf("diskwindow: writing %s: %w", path, err)
	}
	// Opened before the rename: once renamed, expiry may delete it.
	rd, err := os.Open(tmp)
	if err != nil {
		os.Remove(tmp)
		return "", nil, fmt.Errorf("diskwindow: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		rd.Close()
		os.Remove(tmp)
		return "", nil, fmt.Errorf("diskwindow: %w", err)
	}
	if err := syncDir(dir); err != nil {
		rd.Close()
		return "", nil, err
	}
	return path, rd, nil
}

// sortByHigh sorts vals: a counting sort on the u bits above bit L (the
// values are uniform, so buckets hold one or two), then insertion sort in
// each bucket.
func sortByHigh(vals []u128, L, u uint) {
	nb := uint64(1) << u
	start := make([]uint32, nb+1)
	for _, v := range vals {
		start[v.rsh(L).lo+1]++
	}
	for i := uint64(1); i <= nb; i++ {
		start[i] += start[i-1]
	}
	out := make([]u128, len(vals))
	next := start[:nb:nb]
	next = append([]uint32(nil), next...)
	for _, v := range vals {
		h := v.rsh(L).lo
		out[next[h]] = v
		next[h]++
	}
	for h := uint64(0); h < nb; h++ {
		b := out[start[h]:start[h+1]]
		for i := 1; i < len(b); i++ {
			for j := i; j > 0 && b[j].less(b[j-1]); j-- {
				b[j], b[j-1] = b[j-1], b[j]
			}
		}
	}
	copy(vals, out)
}

// openGen opens the generation file at path, checking that it belongs to
// a set of f-bit values under the key keyCheck names. It reads and
// checksums the header and the in-memory part; the low blocks are
// checksummed as lookups read them, or all now if verify is set. A file
// that fails any check is refused with a *CorruptError naming it, before
// anything larger than the file is allocated.
func openGen(path string, f uint, keyCheck uint64, verify bool) (*gen, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("diskwindow: %w", err)
	}
	g, err := readGen(path, file, f, keyCheck, verify)
	if err != nil {
		file.Close()
		return nil, err
	}
	return g, nil
}

func readGen(path string, file *os.File, f uint, keyCheck uint64, verify bool) (*gen, error) {
	bad := func(format string, args ...any) error {
		return &CorruptError{File: path, Reason: fmt.Sprintf(format, args...)}
	}
	st, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("diskwindow: %w", err)
	}
	size := uint64(st.Size())
	var h [genHeaderLen]byte
	if _, err := file.ReadAt(h[:], 0); err != nil {
		return nil, bad("header: %v", err)
	}
	if string(h[:8]) != genMagic {
		return nil, bad("not a generation file (magic %q)", h[:8])
	}
	if c := crc32.Checksum(h[:80], castagnoli); c != binary.LittleEndian.Uint32(h[80:]) {
		return nil, bad("header checksum mismatch")
	}
	version := binary.LittleEndian.Uint32(h[8:])
	if version != 1 && version != genVersion {
		return nil, bad("unsupported version %d", version)
	}
	if uint(h[12]) != f {
		return nil, bad("%d-bit fingerprints, the set's are %d", h[12], f)
	}
	if k := binary.LittleEndian.Uint64(h[72:]); k != keyCheck {
		return nil, bad("written under another set's key")
	}
	n := binary.LittleEndian.Uint64(h[24:])
	if n == 0 || n >= maxGenIDs {
		return nil, bad("%d ids", n)
	}
	if r := uint(h[14]); r != 5 && r != 6 {
		return nil, bad("%d mid bits", r)
	}
	ntags := int(h[15])
	if version == 1 && ntags != 0 || version == 2 && ntags == 0 {
		return nil, bad("version %d with %d generations", version, ntags)
	}
	l := newLayout(n, f, uint(h[14]), ntags)
	if uint(h[13]) != l.u || binary.LittleEndian.Uint64(h[48:]) != l.upperWords ||
		binary.LittleEndian.Uint64(h[56:]) != l.midWords || binary.LittleEndian.Uint64(h[64:]) != l.lowBytes {
		return nil, bad("layout does not match %d ids", n)
	}
	if size != l.total {
		return nil, bad("%d bytes, %d ids take %d", size, n, l.total)
	}
	g := &gen{path: path, file: file, seq: binary.LittleEndian.Uint64(h[16:]), n: n, l: l, cached: -1,
		tmin: int64(binary.LittleEndian.Uint64(h[32:])), tmax: int64(binary.LittleEndian.Uint64(h[40:]))}
	if g.tmin > g.tmax {
		return nil, bad("times out of order")
	}
	meta := make([]byte, l.metaLen) // at most the file's size, checked above
	if _, err := file.ReadAt(meta, 0); err != nil {
		return nil, bad("index: %v", err)
	}
	if c := crc32.Checksum(meta[:l.metaLen-4], castagnoli); c != binary.LittleEndian.Uint32(meta[l.metaLen-4:]) {
		return nil, bad("index checksum mismatch")
	}
	if err := g.readTags(meta[genHeaderLen : genHeaderLen+tagLen*ntags]); err != nil {
		return nil, bad("%v", err)
	}
	p := meta[genHeaderLen+tagLen*ntags:]
	g.upper = make([]uint64, l.upperWords)
	for i := range g.upper {
		g.upper[i] = binary.LittleEndian.Uint64(p[8*i:])
	}
	p = p[8*l.upperWords:]
	g.mid = make([]uint64, l.midWords)
	for i := range g.mid {
		g.mid[i] = binary.LittleEndian.Uint64(p[8*i:])
	}
	p = p[8*l.midWords:]
	g.crcs = make([]uint32, l.nblocks)
	for i := range g.crcs {
		g.crcs[i] = binary.LittleEndian.Uint32(p[4*i:])
	}
	if err := g.index(); err != nil {
		return nil, bad("%v", err)
	}
	g.buf = make([]byte, 2*blockSize)
	if verify {
		for b := uint64(0); b < l.nblocks; b++ {
			if err := g.load(int64(b), 1); err != nil {
				return nil, err
			}
		}
	}
	adviseRandom(file) // after verify's reads, front to back
	return g, nil
}

// readTags reads the tag table b (empty for version 1: one generation,
// the file's) and checks it against the header: sequences ascending, the
// newest the file's, times within the file's, counts summing to n.
func (g *gen) readTags(b []byte) error {
	if len(b) == 0 {
		g.tags = []genTag{{seq: g.seq, tmin: g.tmin, tmax: g.tmax, count: g.n}}
		return nil
	}
	var sum uint64
	g.tags = make([]genTag, 0, len(b)/tagLen)
	for p := b; len(p) > 0; p = p[tagLen:] {
		t := genTag{seq: binary.LittleEndian.Uint64(p), tmin: int64(binary.LittleEndian.Uint64(p[8:])),
			tmax: int64(binary.LittleEndian.Uint64(p[16:])), count: binary.LittleEndian.Uint64(p[24:])}
		if k := len(g.tags); k > 0 && t.seq <= g.tags[k-1].seq {
			return fmt.Errorf("generations out of order")
		}
		if t.tmin > t.tmax || t.tmin < g.tmin || t.tmax > g.tmax || t.count == 0 || t.count > g.n {
			return fmt.Errorf("generation %d's times or count out of the file's", t.seq)
		}
		sum += t.count
		g.tags = append(g.tags, t)
	}
	if g.tags[len(g.tags)-1].seq != g.seq || sum != g.n {
		return fmt.Errorf("generations do not add up to the file's")
	}
	return nil
}

// index checks upper (n ones, none past bit n+2ᵘ) and samples it.
func (g *gen) index() error {
	nbits := g.n + 1<<g.l.u
	ones := uint64(0)
	for i, x := range g.upper {
		if uint64(i) == nbits/64 {
			x &= 1<<(nbits%64) - 1
			if x != g.upper[i] {
				return fmt.Errorf("upper bits past the end")
			}
		}
		ones += uint64(bits.OnesCount64(x))
	}
	if ones != g.n {
		return fmt.Errorf("upper bits hold %d ids, header says %d", ones, g.n)
	}
	buckets := uint64(1) << g.l.u
	g.samples = make([]uint64, 0, buckets>>sampleShift+1)
	g.samples = append(g.samples, 0)
	zeros, next := uint64(0), uint64(1)<<sampleShift
	for i, x := range g.upper {
		if next >= buckets {
			break
		}
		z := uint64(bits.OnesCount64(^x))
		for next < buckets && zeros+z >= next {
			pos := uint64(i)*64 + uint64(selectInWord(^x, next-zeros))
			g.samples = append(g.samples, pos+1)
			next += 1 << sampleShift
		}
		zeros += z
	}
	return nil
}

// bucket returns the first index and the count of the values whose top
// u bits are h.
func (g *gen) bucket(h uint64) (first, count uint64) {
	return g.bucketFrom(g.samples[h>>sampleShift], h)
}

// bucketFrom is bucket given pos, the sample of h's bucket.
func (g *gen) bucketFrom(pos, h uint64) (first, count uint64) {
	k := h & (1<<sampleShift - 1) // zeros to pass
	for k > 0 {
		w, off := pos/64, pos%64
		x := ^g.upper[w] >> off
		z := uint64(bits.OnesCount64(x))
		if z < k {
			k -= z
			pos = (w + 1) * 64
			continue
		}
		pos += uint64(selectInWord(x, k)) + 1
		k = 0
	}
	first = pos - h
	for {
		w, off := pos/64, pos%64
		run := uint64(bits.TrailingZeros64(^(g.upper[w] >> off)))
		if run > 64-off {
			run = 64 - off
		}
		count += run
		if off+run < 64 {
			return first, count
		}
		pos = (w + 1) * 64
	}
}

// has reports whether v, an f-bit value, is in the file, expired or not.
func (g *gen) has(v u128) (bool, error) {
	L := g.l.f - g.l.u
	first, count := g.bucket(v.rsh(L).lo)
	m := v.rsh(g.l.lw).lo & (1<<g.l.r - 1)
	low := v.low(g.l.lw)
	for i := first; i < first+count; i++ {
		mi := getWords(g.mid, i*uint64(g.l.r), g.l.r)
		if mi > m {
			break // sorted: the rest are larger
		}
		if mi < m {
			continue
		}
		x, _, err := g.lowAt(i)
		if err != nil {
			return false, err
		}
		if x == low {
			return true, nil
		}
	}
	return false, nil
}

// maybe reports whether v passes the in-memory part (no disk read).
func (g *gen) maybe(v u128) bool { return len(g.matches(v, nil)) > 0 }

// matches appends the indexes of the values whose upper and mid bits are
// v's: those whose low bits a lookup must read.
func (g *gen) matches(v u128, out []uint64) []uint64 {
	first, count := g.bucket(v.rsh(g.l.f - g.l.u).lo)
	m := v.rsh(g.l.lw).lo & (1<<g.l.r - 1)
	for i := first; i < first+count; i++ {
		mi := getWords(g.mid, i*uint64(g.l.r), g.l.r)
		if mi > m {
			break
		}
		if mi == m {
			out = append(out, i)
		}
	}
	return out
}

// matchBatch is matches for many values at once: for each k, the
// indexes of the values whose upper and mid bits are vals[cand[k]]'s are
// passed to emit(cand[k], index), k in order. cand should be sorted by
// value, so that the in-memory part is read front to back. span is scratch
// space, reused if large enough.
//
// A value's probe is three dependent reads of a large generation's memory,
// each a likely cache miss: its bucket's select sample, the upper words
// after it, and its mid bits. One value after the other, the misses follow
// one another. Here each step is done for a stage of values before the
// next step starts, the sample and the first words of the later steps
// read in passes of independent loads, so that the misses of a stage
// overlap (the CPU keeps many in flight) and the steps that follow find
// the lines in cache.
func (g *gen) matchBatch(vals []u128, cand []int, span [][2]uint64, emit func(id int, i uint64)) [][2]uint64 {
	if cap(span) < len(cand) {
		span = make([][2]uint64, len(cand))
	}
	span = span[:len(cand)]
	L := g.l.f - g.l.u
	r, lw := g.l.r, g.l.lw
	var touch uint64
	for lo := 0; lo < len(cand); lo += matchStage {
		part := cand[lo:min(lo+matchStage, len(cand))]
		sp := span[lo : lo+len(part)]
		for k, id := range part {
			h := vals[id].rsh(L).lo
			sp[k] = [2]uint64{g.samples[h>>sampleShift], h}
		}
		for k := range part {
			touch += g.upper[sp[k][0]/64]
		}
		for k := range part {
			first, count := g.bucketFrom(sp[k][0], sp[k][1])
			sp[k] = [2]uint64{first, count}
			if count > 0 {
				touch += g.mid[first*uint64(r)/64]
			}
		}
		for k, id := range part {
			first, count := sp[k][0], sp[k][1]
			if count == 0 {
				continue
			}
			m := vals[id].rsh(lw).lo & (1<<r - 1)
			for i := first; i < first+count; i++ {
				mi := getWords(g.mid, i*uint64(r), r)
				if mi > m {
					break
				}
				if mi == m {
					emit(id, i)
				}
			}
		}
	}
	g.touched = touch // the touching reads are kept
	return span
}

// matchStage is how many values matchBatch takes through each step at
// once: their lines (a few a value) stay in the core's cache between the
// steps.
const matchStage = 256

// lowInto reads value i's low bits and tag from disk into buf
// (2·blockSize bytes), checking the blocks it reads: safe for concurrent
// use.
func (g *gen) lowInto(i uint64, buf []byte) (u128, uint64, error) {
	w := uint64(g.l.lw + g.l.t)
	p := i * w
	b0 := int64(p / 8 / blockSize)
	b1 := int64((p + w - 1) / 8 / blockSize)
	k := b1 - b0 + 1
	buf = buf[:k*blockSize]
	if _, err := g.file.ReadAt(buf, int64(g.l.lowOff)+b0*blockSize); err != nil {
		return u128{}, 0, &CorruptError{File: g.path, Reason: fmt.Sprintf("low block %d: %v", b0, err)}
	}
	for j := int64(0); j < k; j++ {
		if crc32.Checksum(buf[j*blockSize:(j+1)*blockSize], castagnoli) != g.crcs[b0+j] {
			return u128{}, 0, &CorruptError{File: g.path, Reason: fmt.Sprintf("low block %d: checksum mismatch", b0+j)}
		}
	}
	return g.lowTag(buf, p-uint64(b0)*blockSize*8)
}

// prefetch starts reading the low blocks of value i into the page cache
// (willNeed), for a lowInto that follows; it reports whether it could.
func (g *gen) prefetch(i uint64) bool {
	w := uint64(g.l.lw + g.l.t)
	p := i * w
	b0 := int64(p / 8 / blockSize)
	b1 := int64((p + w - 1) / 8 / blockSize)
	return willNeed(g.file, int64(g.l.lowOff)+b0*blockSize, (b1-b0+1)*blockSize)
}

// lowTag decodes the low bits and tag at bit p of b, checking the tag.
func (g *gen) lowTag(b []byte, p uint64) (u128, uint64, error) {
	low := getWide(b, p, g.l.lw)
	tag := getBytes(b, p+uint64(g.l.lw), g.l.t)
	if tag >= uint64(len(g.tags)) {
		return u128{}, 0, &CorruptError{File: g.path, Reason: fmt.Sprintf("tag %d of %d generations", tag, len(g.tags))}
	}
	return low, tag, nil
}

// lowAt reads value i's low bits and tag from disk.
func (g *gen) lowAt(i uint64) (u128, uint64, error) {
	w := uint64(g.l.lw + g.l.t)
	p := i * w
	b0 := int64(p / 8 / blockSize)
	b1 := int64((p + w - 1) / 8 / blockSize)
	if err := g.load(b0, b1-b0+1); err != nil {
		return u128{}, 0, err
	}
	return g.lowTag(g.buf, p-uint64(b0)*blockSize*8)
}

// load reads k (1 or 2) low blocks from block b into buf and checks them.
func (g *gen) load(b, k int64) error {
	if g.cached == b && g.ncah >= k {
		return nil
	}
	g.cached = -1
	buf := g.buf[:k*blockSize]
	if _, err := g.file.ReadAt(buf, int64(g.l.lowOff)+b*blockSize); err != nil {
		return &CorruptError{File: g.path, Reason: fmt.Sprintf("low block %d: %v", b, err)}
	}
	for j := int64(0); j < k; j++ {
		if crc32.Checksum(buf[j*blockSize:(j+1)*blockSize], castagnoli) != g.crcs[b+j] {
			return &CorruptError{File: g.path, Reason: fmt.Sprintf("low block %d: checksum mismatch", b+j)}
		}
	}
	g.cached, g.ncah = b, k
	return nil
}

// memBytes is what the generation holds in memory.
func (g *gen) memBytes() int {
	return 8*(len(g.upper)+len(g.mid)+len(g.samples)) + 4*len(g.crcs) + len(g.buf)
}

func (g *gen) close() error { return g.file.Close() }
