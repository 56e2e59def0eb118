package diskwindow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/idem-go/idem/internal/compact"
)

// The directory of a set:
//
//	SET                 the manifest: magic "IDEMDWS1", version uint32,
//	                    fingerprint bits uint32, the 16-byte key, CRC-32C
//	gen-<seq>.edf       a sealed generation (gen.go)
//	gen-<seq>.log       the open generation's journal, the highest seq
//	LOCK                empty; an open Set holds an advisory lock on it
//
// Journal: magic "IDEMDWL1", seq uint64, CRC-32C of those 16 bytes
// uint32, 0 uint32; then records, each the new ids of one call:
//
//	count uint32, now int64, count × (fingerprint lo uint64, hi uint32),
//	CRC-32C of the record's preceding bytes uint32
//
// A journal is written only by appending, and fsync'd before any id in it
// is acknowledged; so after a crash only the bytes of the last group
// commit can be torn.
const (
	setMagic     = "IDEMDWS1"
	setVersion   = 1
	setLen       = 8 + 4 + 4 + 16 + 4
	logMagic     = "IDEMDWL1"
	logHeaderLen = 24
	maxRecordIDs = 1 << 16
	// maxTorn is the most a journal's tail may be cut back by at Open: a
	// longer bad tail cannot be one torn group commit, so the journal is
	// refused rather than acknowledged ids forgotten.
	maxTorn = 64 << 20
)

func genPath(dir string, seq uint64) string {
	return filepath.Join(dir, fmt.Sprintf("gen-%016x.edf", seq))
}

func logPath(dir string, seq uint64) string {
	return filepath.Join(dir, fmt.Sprintf("gen-%016x.log", seq))
}

// load opens or creates the set's files. Called by Open only.
func (s *Set) load(c config) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("diskwindow: %w", err)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("diskwindow: %w", err)
	}
	var gens, logs []uint64
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			os.Remove(filepath.Join(s.dir, name)) // a seal a crash cut short
			continue
		}
		for _, kind := range []struct {
			ext  string
			seqs *[]uint64
		}{{".edf", &gens}, {".log", &logs}} {
			if hex, ok := strings.CutSuffix(strings.TrimPrefix(name, "gen-"), kind.ext); ok && strings.HasPrefix(name, "gen-") {
				seq, err := strconv.ParseUint(hex, 16, 64)
				if err != nil {
					return &CorruptError{File: filepath.Join(s.dir, name), Reason: "not a generation's name"}
				}
				*kind.seqs = append(*kind.seqs, seq)
			}
		}
	}
	slices.Sort(gens)
	slices.Sort(logs)
	key, f, err := s.manifest(c, len(gens)+len(logs) > 0)
	if err != nil {
		return err
	}
	s.f = f
	s.hasher = compact.NewHasher(key)
	s.keyCheck = key.Sum("diskwindow", "key check").Lo
	s.open = compact.NewSet()
	next := uint64(0)
	for _, seq := range gens {
		g, err := openGen(genPath(s.dir, seq), f, s.keyCheck, c.verify)
		if err != nil {
			return err
		}
		if g.seq != seq {
			g.close()
			return &CorruptError{File: g.path, Reason: fmt.Sprintf("holds generation %d", g.seq)}
		}
		s.gens = append(s.gens, g)
		s.latest = max(s.latest, g.tmax)
		next = seq + 1
	}
	s.dropSuperseded()
	// Journals of sealed generations are leftovers of a crash during a
	// seal; the open generation's is the one above them.
	var live []uint64
	for _, seq := range logs {
		if seq < next {
			os.Remove(logPath(s.dir, seq))
		} else {
			live = append(live, seq)
		}
	}
	if len(live) > 2 {
		return &CorruptError{File: logPath(s.dir, live[0]), Reason: fmt.Sprintf("%d open journals", len(live))}
	}
	if len(live) == 2 {
		// A crash while the older generation was sealed in the
		// background: seal it now, then open the newer one.
		s.openSeq = live[0]
		if err := s.replay(logPath(s.dir, live[0])); err != nil {
			return err
		}
		s.log.Close()
		s.log = nil
		if s.open.Len() > 0 {
			g, err := s.sealFile(s.open, live[0])
			if err != nil {
				return err
			}
			s.gens = append(s.gens, g)
		}
		os.Remove(logPath(s.dir, live[0]))
		s.open = compact.NewSet()
		live = live[1:]
	}
	if len(live) == 1 {
		s.openSeq = live[0]
		return s.replay(logPath(s.dir, live[0]))
	}
	s.openSeq = next
	log, err := createLog(s.dir, next)
	if err != nil {
		return err
	}
	s.log, s.logBytes = log, logHeaderLen
	return nil
}

// dropSuperseded deletes the files whose generations a newer file holds
// too: the older input of a merge that a crash cut short after the merged
// file was renamed into place. Files of a set hold disjoint spans of
// generations otherwise, so any overlap is such a leftover.
func (s *Set) dropSuperseded() {
	var keep []*gen
	lo := uint64(math.MaxUint64) // the oldest generation of the files kept
	for i := len(s.gens) - 1; i >= 0; i-- {
		g := s.gens[i]
		if g.seq >= lo {
			g.close()
			os.Remove(g.path)
			continue
		}
		lo = g.tags[0].seq
		keep = append(keep, g)
	}
	slices.Reverse(keep)
	s.gens = keep
}

// manifest reads the SET file, or writes a new one if the directory holds
// no set.
func (s *Set) manifest(c config, existing bool) (compact.Key, uint, error) {
	path := filepath.Join(s.dir, "SET")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !existing {
		key := compact.NewKey()
		f := uint(85)
		if c.f != 0 {
			f = uint(c.f)
		}
		b = make([]byte, 0, setLen)
		b = append(b, setMagic...)
		b = binary.LittleEndian.AppendUint32(b, setVersion)
		b = binary.LittleEndian.AppendUint32(b, uint32(f))
		b = append(b, key[:]...)
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
		if err := writeFileSync(s.dir, "SET", b); err != nil {
			return key, 0, err
		}
		return key, f, nil
	}
	if err != nil {
		return compact.Key{}, 0, fmt.Errorf("diskwindow: %w", err)
	}
	var key compact.Key
	if len(b) != setLen || string(b[:8]) != setMagic || crc32.Checksum(b[:setLen-4], castagnoli) != binary.LittleEndian.Uint32(b[setLen-4:]) {
		return key, 0, &CorruptError{File: path, Reason: "not an intact manifest"}
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != setVersion {
		return key, 0, &CorruptError{File: path, Reason: fmt.Sprintf("unsupported version %d", v)}
	}
	f := uint(binary.LittleEndian.Uint32(b[12:]))
	if f < 64 || f > 96 {
		return key, 0, &CorruptError{File: path, Reason: fmt.Sprintf("%d-bit fingerprints", f)}
	}
	if c.f != 0 && uint(c.f) != f {
		return key, 0, fmt.Errorf("diskwindow: %s holds %d-bit fingerprints, not %d", path, f, c.f)
	}
	copy(key[:], b[16:32])
	return key, f, nil
}

func writeFileSync(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("diskwindow: %w", err)
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("diskwindow: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("diskwindow: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("diskwindow: syncing %s: %w", dir, err)
	}
	return nil
}

// createLog creates generation seq's empty journal, durably: its header
// is written to a temporary file and renamed into place, so that a crash
// never leaves a journal without an intact header.
func createLog(dir string, seq uint64) (*os.File, error) {
	path := logPath(dir, seq)
	if err := writeFileSync(dir, filepath.Base(path), logHeader(seq)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("diskwindow: %w", err)
	}
	return f, nil
}

func logHeader(seq uint64) []byte {
	b := make([]byte, 0, logHeaderLen)
	b = append(b, logMagic...)
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return binary.LittleEndian.AppendUint32(b, 0)
}

// appendRecords appends the journal records of fps, first accepted at t.
func appendRecords(b []byte, t int64, fps []compact.FP) []byte {
	for len(fps) > 0 {
		part := fps[:min(len(fps), maxRecordIDs)]
		fps = fps[len(part):]
		start := len(b)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(part)))
		b = binary.LittleEndian.AppendUint64(b, uint64(t))
		for _, fp := range part {
			b = binary.LittleEndian.AppendUint64(b, fp.Lo)
			b = binary.LittleEndian.AppendUint32(b, fp.Hi)
		}
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
	}
	return b
}

// maxOpenReserve caps the index replay sizes in advance.
const maxOpenReserve = 1 << 28

// replay reads the open generation's journal into s.open, cutting a torn
// tail, and keeps it open for appending.
func (s *Set) replay(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("diskwindow: %w", err)
	}
	s.log = f
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("diskwindow: %w", err)
	}
	// No index growth while replaying, nor after it while the generation
	// fills as the last sealed one did (as seal sizes the next one).
	want := len(b) / 12
	if len(s.gens) > 0 {
		tags := s.gens[len(s.gens)-1].tags
		want = max(want, min(int(tags[len(tags)-1].count), s.maxOpen))
	}
	s.open.Reserve(min(want, maxOpenReserve))
	good, err := decodeLog(path, b, s.openSeq, func(t int64, fp compact.FP) error {
		if t > s.latest {
			s.latest = t
			if cut := t - s.w; cut < t {
				s.open.DropThrough(cut) // as Add did: an id expired and came back
			}
		}
		// No lookup: a journal that passed its checksums holds each live
		// id once, as Add wrote it.
		return s.open.Append(fp, compact.Rec{T: s.latest, Seq: s.open.NextSeq()})
	})
	if err != nil {
		return err
	}
	if good < len(b) {
		if err := f.Truncate(int64(good)); err != nil {
			return fmt.Errorf("diskwindow: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("diskwindow: %w", err)
		}
	}
	s.logBytes = int64(good)
	return nil
}

// decodeLog calls fn for each id of journal b, in order, and returns the
// length of its whole records. A bad record followed by at most maxTorn
// bytes ends the journal (a torn last commit); a longer bad tail, a bad
// header or an error from fn is a *CorruptError.
func decodeLog(path string, b []byte, seq uint64, fn func(t int64, fp compact.FP) error) (int, error) {
	bad := func(format string, args ...any) (int, error) {
		return 0, &CorruptError{File: path, Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) < logHeaderLen || string(b[:8]) != logMagic ||
		crc32.Checksum(b[:16], castagnoli) != binary.LittleEndian.Uint32(b[16:]) {
		return bad("not an intact journal header")
	}
	if got := binary.LittleEndian.Uint64(b[8:]); got != seq {
		return bad("journal of generation %d", got)
	}
	off := logHeaderLen
	for off < len(b) {
		rest := b[off:]
		n := 0
		ok := len(rest) >= 12
		if ok {
			n = int(binary.LittleEndian.Uint32(rest))
			ok = n > 0 && n <= maxRecordIDs && len(rest) >= 12+12*n+4
		}
		if ok {
			end := 12 + 12*n
			ok = crc32.Checksum(rest[:end], castagnoli) == binary.LittleEndian.Uint32(rest[end:])
		}
		if !ok {
			if len(rest) > maxTorn {
				return bad("bad record at byte %d, %d bytes before the end", off, len(rest))
			}
			return off, nil
		}
		t := int64(binary.LittleEndian.Uint64(rest[4:]))
		for i := 0; i < n; i++ {
			p := rest[12+12*i:]
			fp := compact.FP{Lo: binary.LittleEndian.Uint64(p), Hi: binary.LittleEndian.Uint32(p[8:])}
			if err := fn(t, fp); err != nil {
				return bad("record at byte %d: %v", off, err)
			}
		}
		off += 12 + 12*n + 4
	}
	return off, nil
}
