package diskwindow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/compact"
	"github.com/idem-go/idem/internal/option"
)

var (
	// ErrClosed is returned by calls on a closed Set.
	ErrClosed = errors.New("diskwindow: closed")
	// ErrTooLong is returned when scope and id together exceed MaxKeyLen
	// bytes. Nothing is recorded.
	ErrTooLong = errors.New("diskwindow: scope and id are too long")
	// ErrCorrupt is wrapped by every *CorruptError.
	ErrCorrupt = errors.New("diskwindow: corrupt file")
	// ErrLocked is returned by Open when another Set, in this process or
	// another, has the directory open (on Linux, macOS and the BSDs, by an
	// advisory lock on the directory's LOCK file, released when the Set
	// closes or its process dies).
	ErrLocked = errors.New("diskwindow: directory in use")
)

// MaxKeyLen is the longest scope plus id, in bytes, a Set records.
const MaxKeyLen = 64 << 10

// CorruptError names a file of the set that failed a check: bad magic,
// unknown version, wrong size, a checksum mismatch, another set's key, or
// contents that break the format's invariants. Nothing of the file was
// used. It wraps ErrCorrupt.
type CorruptError struct {
	File   string
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("diskwindow: corrupt file %s: %s", e.File, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Option configures Open.
type Option func(*config) error

type config struct {
	gens     int
	maxOpen  int
	f        int
	verify   bool
	noMerge  bool      // tests: keep every generation in a file of its own
	noAdvise bool      // tests: read blocks as where posix_fadvise is missing
	onSeal   *sealHook // tests: called by a background seal before it writes
}

// WithGenerations cuts the horizon into k generations (k > 0, default
// 24: an hour each for a day): the open generation is sealed into a file
// once its oldest id is horizon/k old. An id may be reported a duplicate
// for up to horizon + horizon/k after its first accept (never less than
// the horizon); more generations tighten that and cost a probe each.
func WithGenerations(k int) Option {
	return option.Check("diskwindow", k > 0, func(c *config) { c.gens = k }, "generations %d must be positive", k)
}

// WithMaxOpen seals the open generation when it holds n ids (n > 0,
// default 5·2²³ = 41,943,040), whatever its age: the open generation
// costs about 22 bytes an id of memory, so n bounds that (the default:
// 920 MB). A generation of n ids with n/2^⌊log₂n⌋ at or just above 1.25
// (as the default) gets the tightest in-memory filter under 1 byte an id:
// half the false block reads of one of 2²⁵ ids.
func WithMaxOpen(n int) Option {
	return option.Check("diskwindow", n > 0 && int64(n) < compact.MaxRecords,
		func(c *config) { c.maxOpen = n }, "max open %d must be in [1, 2³¹)", n)
}

// WithFingerprintBits sets the fingerprint width f of a new set (64 ≤ f
// ≤ 96, default 85). The chance that some new id is reported a duplicate
// falsely is at most N·L/2^f for N ids added while at most L are live:
// 85 bits hold the seeds' day (N = L = 8.64×10⁹) under 10⁻⁶. Each bit
// costs one bit an id on disk. An existing set keeps the width it was
// made with; a different one given here is an error.
func WithFingerprintBits(f int) Option {
	return option.Check("diskwindow", f >= 64 && f <= 96, func(c *config) { c.f = f }, "fingerprint bits %d must be in [64, 96]", f)
}

// WithVerify makes Open read and checksum every block of every sealed
// file, instead of the in-memory part alone (the rest is checked as it
// is read): a damaged file is then refused at Open rather than by the
// first lookup that reads the damaged block.
func WithVerify() Option { return func(c *config) error { c.verify = true; return nil } }

// defaultMaxOpen is WithMaxOpen's default: 1.25·2²⁵ ids, a generation
// whose filter gets a sixth mid bit (midBitsFor).
const defaultMaxOpen = 5 << 23

// Set is a persistent, exact time-window dedup set: see the package
// documentation. It is safe for concurrent use. One process at a time
// may open a directory.
type Set struct {
	dir      string
	w, span  int64
	maxOpen  int
	f        uint
	hasher   *compact.Hasher
	keyCheck uint64

	syncMu  sync.Mutex    // the group commit leader; taken before mu
	durable atomic.Uint64 // commits on disk
	spare   []byte        // under syncMu

	mu         sync.Mutex
	err        error // sticky: a write or sync failed
	closed     bool
	latest     int64
	open       *compact.Set
	openSeq    uint64
	frozen     *compact.Set  // the generation sealed in the background, read-only; nil if none
	sealDone   chan struct{} // closed when the background seal ends; nil if none runs
	frozenLog  int64         // the frozen generation's journal bytes
	log        *os.File
	logBytes   int64
	pending    []byte   // journal records not yet written
	readBuf    []byte   // probeSealed's block buffer, under mu
	pendingSeq uint64   // commits appended to pending, ever
	gens       []*gen   // oldest first
	lock       *os.File // dir's LOCK file, locked while the Set is open

	noMerge    bool
	noAdvise   bool
	onSeal     *sealHook
	merging    chan struct{} // closed when the merge running ends; nil if none
	nextExpiry int64         // when a generation next expires: a merge may be due
	stopMerge  atomic.Bool   // set by Close
}

// sealHook is a test's hook into background seals (a pointer: config
// stays comparable).
type sealHook struct{ fn func() }

// Open opens the set in dir, creating dir and a new set if it holds
// none, with the given horizon (> 0): an id is a duplicate while less
// than the horizon has passed since its first accept. The horizon may
// change between opens. Open reads every sealed generation's in-memory
// part (under 1 byte an id) and replays the open generation's journal;
// it refuses a damaged file with a *CorruptError naming it, and uses
// nothing of it. A journal whose tail was torn by a crash (a group commit
// that was never acknowledged) is cut back to its last whole record.
func Open(dir string, horizon time.Duration, opts ...Option) (*Set, error) {
	if horizon <= 0 {
		return nil, fmt.Errorf("diskwindow: horizon %v must be positive: %w", horizon, idem.ErrInvalidOption)
	}
	c := config{gens: 24, maxOpen: defaultMaxOpen}
	if err := option.Apply("diskwindow", &c, opts); err != nil {
		return nil, err
	}
	s := &Set{dir: dir, w: int64(horizon), span: max(int64(horizon)/int64(c.gens), 1), maxOpen: c.maxOpen, noMerge: c.noMerge, noAdvise: c.noAdvise, onSeal: c.onSeal}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("diskwindow: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	if err := s.load(c); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.mu.Lock()
	s.maybeMerge()
	s.mu.Unlock()
	return s, nil
}

// Add reports whether (scope, id) was first accepted less than the
// horizon ago, and records it if not. Ids are compared by a keyed
// fingerprint: see the package documentation for the bound on false
// duplicates; a true duplicate is never reported new.
//
// Durability: when Add returns dup == false with a nil error, the id is
// on disk (its journal record fsync'd, alone or in a group commit with
// concurrent calls): after a crash and Open it is still a duplicate. A
// duplicate answer is returned only once the id it matched is on disk
// too. If the process dies before Add returns, the id may or may not have
// been recorded; the caller has acknowledged nothing, so a redelivery is
// answered either way. On an error nothing may be assumed recorded: fail
// closed (do not process, do not acknowledge). A write or fsync error
// breaks the Set: every later call returns it.
//
// ctx is checked before anything is done; once the call has recorded an
// id it waits for the fsync whatever ctx says.
func (s *Set) Add(ctx context.Context, scope, id string, now time.Time) (dup bool, err error) {
	var one [1]bool
	r, err := s.AddBatch(ctx, scope, []string{id}, now, one[:0])
	if err != nil {
		return false, err
	}
	return r[0], nil
}

// AddBatch is Add for each of ids in order, in scope, all at now, with
// one answer per id (true: duplicate) appended to dups (pass dups[:0] to
// reuse its memory). An id repeated within the batch is a duplicate of
// its first occurrence. The new ids of the batch are written to the
// journal in one record and fsync'd once, which is what makes it the
// fast call: where a consumer receives messages in batches, use it. The
// sealed generations are probed in fingerprint order. On an error
// (ErrTooLong for any id, a corrupt file, a failed write) the answers are
// not returned; ids of the batch may have been recorded.
func (s *Set) AddBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error) {
	fps, err := s.begin(ctx, scope, ids, now)
	if err != nil {
		return nil, err
	}
	if s.sealDue() {
		// Seal before recording: a generation spans less than
		// horizon/k of first accepts, so no id outlives horizon + horizon/k.
		s.mu.Unlock()
		if err := s.sealIf(false); err != nil {
			return nil, err
		}
		s.mu.Lock()
		if err := s.usable(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.advance(now.UnixNano())
	}
	base := len(dups)
	dups, err = s.answer(fps, dups, true)
	target := s.pendingSeq
	due := s.sealDue()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := s.commit(target); err != nil {
		return nil, err
	}
	if due {
		if err := s.sealIf(false); err != nil {
			return nil, err
		}
	}
	return dups[:base+len(ids)], nil
}

// SeenBatch reports, for each of ids in scope, whether it was first
// accepted less than the horizon ago, without recording anything: one
// answer per id appended to dups (an id repeated within ids is answered
// the same each time). With AddBatch it records an id only once the work
// it stands for is done: ask SeenBatch, do the work for the new ids, then
// AddBatch them before acknowledging. A consumer that records first and
// fails in between would skip the message on redelivery; one that records
// after has only the window between its work and AddBatch in which a
// redelivery repeats the work (its effect must absorb that, as any
// at-least-once effect does).
//
// Like Add, a duplicate is answered only once the id it matched is on
// disk: SeenBatch waits for a group commit in flight that holds it.
func (s *Set) SeenBatch(ctx context.Context, scope string, ids []string, now time.Time, dups []bool) ([]bool, error) {
	fps, err := s.begin(ctx, scope, ids, now)
	if err != nil {
		return nil, err
	}
	base := len(dups)
	dups, err = s.answer(fps, dups, false)
	target := s.pendingSeq
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if slices.Contains(dups[base:], true) {
		if err := s.commit(target); err != nil {
			return nil, err
		}
	}
	return dups[:base+len(ids)], nil
}

// begin checks ids, fingerprints them in scope, and returns holding mu
// with the clock advanced to now, unless it returns an error.
func (s *Set) begin(ctx context.Context, scope string, ids []string, now time.Time) ([]compact.FP, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if len(scope)+len(id) > MaxKeyLen {
			return nil, fmt.Errorf("diskwindow: %d bytes, limit %d: %w", len(scope)+len(id), MaxKeyLen, ErrTooLong)
		}
	}
	fps := make([]compact.FP, len(ids))
	buf := new([16]byte)
	for i, id := range ids {
		fps[i] = s.hasher.SumBuf(scope, id, buf)
	}
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.advance(now.UnixNano())
	return fps, nil
}

// answer answers fps in order, under mu, and with record appends new ids
// to the open generation and their record to pending.
func (s *Set) answer(fps []compact.FP, dups []bool, record bool) ([]bool, error) {
	base := len(dups)
	var cand []int // ids absent from the open generation
	// The index groups are loaded a few at a time before they are read
	// (Touch): the misses of a large open generation overlap instead of
	// following one another.
	for j := 0; j < len(fps); j += compact.TouchBatch {
		part := fps[j:min(j+compact.TouchBatch, len(fps))]
		s.open.Touch(part)
		for i, fp := range part {
			_, ok := s.open.Find(fp)
			dups = append(dups, ok)
			if !ok {
				cand = append(cand, j+i)
			}
		}
	}
	if s.frozen != nil && len(cand) > 0 {
		cand = s.probeFrozen(fps, cand, dups[base:])
	}
	vals := make([]u128, len(fps))
	for _, i := range cand {
		vals[i] = s.value(fps[i])
	}
	// In fingerprint order: sealed files are probed in order, and an id
	// repeated within the batch lands next to its first occurrence.
	slices.SortFunc(cand, func(a, b int) int {
		if c := cmp.Compare(vals[a].hi, vals[b].hi); c != 0 {
			return c
		}
		if c := cmp.Compare(vals[a].lo, vals[b].lo); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if err := s.probeSealed(cand, vals, dups[base:]); err != nil {
		return nil, err
	}
	if !record {
		return dups, nil
	}
	for j := 1; j < len(cand); j++ {
		if vals[cand[j]] == vals[cand[j-1]] {
			dups[base+cand[j]] = true // repeated within the batch
		}
	}
	fresh := make([]compact.FP, 0, len(cand))
	for i, fp := range fps {
		if !dups[base+i] {
			fresh = append(fresh, fp)
		}
	}
	for j := 0; j < len(fresh); j += compact.TouchBatch {
		part := fresh[j:min(j+compact.TouchBatch, len(fresh))]
		s.open.Touch(part)
		for _, fp := range part {
			if err := s.open.Append(fp, compact.Rec{T: s.latest, Seq: s.open.NextSeq()}); err != nil {
				return nil, fmt.Errorf("diskwindow: %w", err)
			}
		}
	}
	if len(fresh) > 0 {
		s.pending = appendRecords(s.pending, s.latest, fresh)
		s.pendingSeq++
	}
	return dups, nil
}

// probeFrozen sets dups[i] for the ids cand[…] = i live in the generation
// being sealed in the background, and returns the others.
func (s *Set) probeFrozen(fps []compact.FP, cand []int, dups []bool) []int {
	cut := s.cut()
	rest := make([]int, 0, len(cand))
	var part [compact.TouchBatch]compact.FP
	for j := 0; j < len(cand); j += compact.TouchBatch {
		ids := cand[j:min(j+compact.TouchBatch, len(cand))]
		for k, i := range ids {
			part[k] = fps[i]
		}
		s.frozen.Touch(part[:len(ids)])
		for _, i := range ids {
			// Not dropped as it expires (it is read while its file is
			// written): an expired id answers new, as in the open one.
			if r, ok := s.frozen.Find(fps[i]); ok && r.T > cut {
				dups[i] = true
			} else {
				rest = append(rest, i)
			}
		}
	}
	return rest
}

// probeSealed sets dups[i] for the ids cand[…] = i (sorted by value)
// found in a sealed generation. The in-memory parts are probed first; the
// disk reads they leave (a few in a hundred ids per generation, and every
// true duplicate) all start before the first is waited for, so that a
// cold page cache costs the disk's parallel latency, not the sum of the
// reads': on Linux each block is asked for with POSIX_FADV_WILLNEED and
// then read in turn, elsewhere up to maxReaders goroutines read at once.
func (s *Set) probeSealed(cand []int, vals []u128, dups []bool) error {
	cut := s.cut()
	type read struct {
		g   *gen
		id  int
		pos uint64
	}
	var reads []read
	var span [][2]uint64
	for gi := len(s.gens) - 1; gi >= 0; gi-- {
		g := s.gens[gi]
		span = g.matchBatch(vals, cand, span, func(id int, p uint64) {
			reads = append(reads, read{g, id, p})
		})
	}
	if len(reads) == 0 {
		return nil
	}
	found := make([]bool, len(reads))
	errs := make([]error, len(reads))
	readOne := func(k int, buf []byte) {
		r := reads[k]
		low, tag, err := r.g.lowInto(r.pos, buf)
		errs[k] = err
		found[k] = err == nil && low == vals[r.id].low(r.g.l.lw) && r.g.live(tag, cut)
	}
	// Every read is started first, then each is read in turn: the
	// kernel's reads overlap without a goroutine blocked on each.
	prefetched := !s.noAdvise
	for _, r := range reads {
		if !prefetched {
			break
		}
		prefetched = r.g.prefetch(r.pos)
	}
	if prefetched {
		if s.readBuf == nil {
			s.readBuf = make([]byte, 2*blockSize)
		}
		for k := range reads {
			readOne(k, s.readBuf)
		}
	} else {
		workers := min(len(reads), maxReaders)
		var wg sync.WaitGroup
		var next atomic.Int64
		for range workers {
			wg.Go(func() {
				buf := make([]byte, 2*blockSize)
				for k := int(next.Add(1) - 1); k < len(reads); k = int(next.Add(1) - 1) {
					readOne(k, buf)
				}
			})
		}
		wg.Wait()
	}
	for k, r := range reads {
		if errs[k] != nil {
			return errs[k]
		}
		if found[k] {
			dups[r.id] = true
		}
	}
	return nil
}

// cut is the newest first accept that has expired at the latest now;
// math.MinInt64 while the horizon reaches before the clock's zero.
func (s *Set) cut() int64 {
	if c := s.latest - s.w; c <= s.latest {
		return c
	}
	return math.MinInt64
}

// maxReaders bounds the concurrent block reads of one call.
const maxReaders = 32

// value is fp cut to the set's f bits.
func (s *Set) value(fp compact.FP) u128 {
	return u128{hi: uint64(fp.Hi) & (1<<(s.f-64) - 1), lo: fp.Lo}
}

func (s *Set) usable() error {
	if s.closed {
		return ErrClosed
	}
	return s.err
}

// advance moves the clock to nowNs (never backwards), drops the open
// generation's expired ids and deletes the sealed generations whose
// every id has expired.
func (s *Set) advance(nowNs int64) {
	if nowNs > s.latest {
		s.latest = nowNs
	}
	cut := s.latest - s.w
	if cut > s.latest {
		return
	}
	s.open.DropThrough(cut)
	for len(s.gens) > 0 && s.gens[0].tmax <= cut {
		g := s.gens[0]
		g.close()
		os.Remove(g.path) // a file left by a crash is deleted at the next open
		s.gens = s.gens[1:]
	}
	if cut >= s.nextExpiry {
		s.maybeMerge()
	}
}

// sealDue reports whether the open generation should be sealed.
func (s *Set) sealDue() bool {
	if s.open.Len() >= s.maxOpen {
		return true
	}
	t, ok := s.open.Oldest()
	return ok && s.latest-t >= s.span
}

// commit waits until the journal holds the commits up to target: the
// first caller in writes and fsyncs everything pending for all (group
// commit), the others wait for it.
func (s *Set) commit(target uint64) error {
	if s.durable.Load() >= target {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		return err
	}
	if s.durable.Load() >= target {
		s.mu.Unlock()
		return nil
	}
	buf, seq, log := s.pending, s.pendingSeq, s.log
	s.pending = s.spare[:0]
	s.mu.Unlock()
	_, err := log.Write(buf)
	if err == nil {
		err = log.Sync()
	}
	if err != nil {
		err = fmt.Errorf("diskwindow: journal %s: %w", log.Name(), err)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	s.logBytes += int64(len(buf))
	s.mu.Unlock()
	s.spare = buf
	s.durable.Store(seq)
	return nil
}

// Seal writes the open generation to a sealed file now, whatever its
// size and age, starts a new one, and returns once the file is written.
// Add seals by itself, in the background (see WithGenerations and
// WithMaxOpen); Seal is for tests and for callers that want memory back
// before a quiet period.
func (s *Set) Seal() error { return s.sealIf(true) }

// Expire moves the set's clock to now (never backwards): expired ids are
// dropped, expired files deleted, and the open generation sealed if it is
// due. Add does this itself; Expire is for a set that receives nothing.
func (s *Set) Expire(now time.Time) error {
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	s.advance(now.UnixNano())
	s.mu.Unlock()
	return s.sealIf(false)
}

func (s *Set) sealIf(force bool) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if s.open.Len() == 0 || !force && !s.sealDue() {
		if force {
			s.waitSealLocked()
			return s.usable()
		}
		return nil
	}
	// One generation is sealed at a time: a generation that filled
	// before the last one's file was written waits for it.
	s.waitSealLocked()
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.seal(); err != nil {
		s.err = err
		return err
	}
	if force {
		s.waitSealLocked()
		return s.usable()
	}
	return nil
}

// waitSealLocked waits, with mu held (released while it waits), until no
// background seal runs. With syncMu held no new one can start.
func (s *Set) waitSealLocked() {
	for s.sealDone != nil {
		done := s.sealDone
		s.mu.Unlock()
		<-done
		s.mu.Lock()
	}
}

// seal freezes the open generation and starts its sealed file's write in
// the background: its pending records are written to its journal and
// fsync'd, the next generation starts with a journal of its own, and the
// frozen generation answers lookups from memory until its file is in
// place; then its journal is deleted. A crash before that leaves both
// journals, and Open seals the older one. Called with syncMu and mu held
// and no background seal running.
func (s *Set) seal() error {
	if len(s.pending) > 0 {
		if _, err := s.log.Write(s.pending); err != nil {
			return fmt.Errorf("diskwindow: journal %s: %w", s.log.Name(), err)
		}
		if err := s.log.Sync(); err != nil {
			return fmt.Errorf("diskwindow: journal %s: %w", s.log.Name(), err)
		}
		s.logBytes += int64(len(s.pending))
		s.pending = s.pending[:0]
	}
	s.durable.Store(s.pendingSeq)
	log, err := createLog(s.dir, s.openSeq+1)
	if err != nil {
		return err
	}
	old, frozen, seq := s.log, s.open, s.openSeq
	s.frozenLog = s.logBytes
	s.log, s.logBytes = log, logHeaderLen
	s.openSeq++
	s.open = compact.NewSet()
	// The next generation is likely to fill as this one did: size its
	// index for as many ids now (at most maxOpen), so that it never grows
	// by moving its records (a fifth of AddBatch's CPU time when it did).
	s.open.Reserve(min(frozen.Len(), s.maxOpen))
	old.Close()
	done := make(chan struct{})
	s.frozen, s.sealDone = frozen, done
	go s.sealBackground(frozen, seq, old.Name(), done)
	return nil
}

// sealBackground writes the frozen generation's file, then puts it in
// place of the frozen generation and deletes its journal.
func (s *Set) sealBackground(frozen *compact.Set, seq uint64, logName string, done chan struct{}) {
	defer close(done)
	if s.onSeal != nil {
		s.onSeal.fn()
	}
	g, err := s.sealFile(frozen, seq)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealDone = nil
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.gens = append(s.gens, g)
	s.frozen, s.frozenLog = nil, 0
	os.Remove(logName)
	s.maybeMerge()
}

// sealFile writes generation seq, the ids of set, as a sealed file and
// opens it. set is only read.
func (s *Set) sealFile(set *compact.Set, seq uint64) (*gen, error) {
	vals := make([]u128, 0, set.Len())
	set.Each(func(fp compact.FP, _ compact.Rec) { vals = append(vals, s.value(fp)) })
	tmin, _ := set.Oldest()
	tmax, _ := set.Newest()
	path, err := writeGen(s.dir, seq, s.f, s.keyCheck, vals, tmin, tmax)
	if err != nil {
		return nil, err
	}
	return openGen(path, s.f, s.keyCheck, false)
}

// Stats describes a Set's size.
type Stats struct {
	IDs          int   // ids held: open and sealed, expired ones in live files included
	OpenIDs      int   // ids in the open generation (and in one sealed in the background)
	Generations  int   // sealed generations, merged or not
	Files        int   // sealed files (runs of merged generations)
	DiskBytes    int64 // sealed files and the journal
	JournalBytes int64 // the journals alone (12 bytes an open id)
	SealedMem    int   // memory the sealed generations hold
	OpenMem      int   // memory the open generation holds
}

// Stats reports the set's size.
func (s *Set) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{OpenIDs: s.open.Len(), Files: len(s.gens), OpenMem: s.open.Bytes(), DiskBytes: s.logBytes, JournalBytes: s.logBytes}
	if s.frozen != nil { // sealed in the background: still in memory
		st.OpenIDs += s.frozen.Len()
		st.OpenMem += s.frozen.Bytes()
		st.DiskBytes += s.frozenLog
		st.JournalBytes += s.frozenLog
	}
	st.IDs = st.OpenIDs
	for _, g := range s.gens {
		st.Generations += len(g.tags)
		st.IDs += int(g.n)
		st.DiskBytes += int64(g.l.total)
		st.SealedMem += g.memBytes()
	}
	return st
}

// Close writes what is pending, closes the files and releases the
// memory. The open generation stays in its journal, replayed by the next
// Open. Calls after Close return ErrClosed.
func (s *Set) Close() error {
	err := s.commit(s.pendingTarget())
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	s.waitSealLocked() // no seal starts: syncMu is held
	s.mu.Unlock()
	s.stopMerge.Store(true)
	s.waitMerges()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	if cerr := s.closeFiles(); err == nil {
		err = cerr
	}
	return err
}

func (s *Set) pendingTarget() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingSeq
}

func (s *Set) closeFiles() error {
	var err error
	if s.log != nil {
		err = s.log.Close()
		s.log = nil
	}
	for _, g := range s.gens {
		g.close()
	}
	s.gens = nil
	if s.lock != nil {
		err = errors.Join(err, s.lock.Close()) // releases the lock
		s.lock = nil
	}
	return err
}
