package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/idem-go/idem/internal/compact"
)

// ErrCorruptSnapshot is wrapped by the errors of ReadSnapshot and
// LoadSnapshot when the data is not a complete, intact snapshot: bad magic,
// unknown version, truncated, a checksum mismatch, or records that break
// the Dedup's invariants. The Dedup is left unchanged.
var ErrCorruptSnapshot = errors.New("window: corrupt snapshot")

// Snapshot encoding, versions 1 and 2. Integers are big-endian and fixed
// width.
//
//	magic     4 bytes  "IDWN"
//	version   uint8    2, or 1 (see below)
//	window    int64    nanoseconds (informational: the loading Dedup's own window applies)
//	key       16 bytes the fingerprint key
//	latest    int64    the latest now seen, Unix nanoseconds
//	next      uint64   the next accepted id's sequence
//	count     uint64   live ids N; their sequences are next−N … next−1
//	N records, oldest first:
//	    fingerprint 12 bytes (uint64 then uint32), first accept int64 (Unix ns)
//	checksum  uint32   CRC-32C (Castagnoli) of every preceding byte
//
// The versions differ only in how the fingerprints were computed. In
// version 2 a canonical lowercase UUID id was fingerprinted on the AES path
// of compact.Hasher and any other id with SipHash; in version 1 (written
// before the AES path existed) every id was fingerprinted with SipHash. A
// version-1 snapshot still loads: the Dedup then fingerprints every id
// with SipHash, as the snapshot's writer did, so that the ids it holds are
// still recognised, and writes version 1 in turn. A new Dedup writes
// version 2, which earlier builds refuse ("unsupported version 2").
//
// The file holds the fingerprint key: whoever can read it can craft ids
// that collide, so SaveSnapshot creates it readable by its owner only.
const (
	snapMagic     = "IDWN"
	snapVersion   = 2 // what a Dedup with the UUID path writes
	snapVersionV1 = 1 // every id through SipHash
	snapHeaderLen = 4 + 1 + 8 + 16 + 8 + 8 + 8
	snapRecordLen = 12 + 8
)

// WriteSnapshot writes every live id (fingerprint, first accept, sequence
// implied by order), the clock and the fingerprint key to w, in the format
// above: 20 bytes an id. Calls on the Dedup wait while it writes. Ids
// accepted after the snapshot are not in it: after a crash and a restore
// their duplicates are let through, as they would be without the snapshot.
func (d *Dedup) WriteSnapshot(w io.Writer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	bw := compact.NewSnapWriter(w)
	var b [snapHeaderLen]byte
	h := append(b[:0], snapMagic...)
	hs := d.key.Load()
	if hs.UUIDPath() {
		h = append(h, snapVersion)
	} else {
		h = append(h, snapVersionV1)
	}
	key := hs.Key()
	h = binary.BigEndian.AppendUint64(h, uint64(d.w))
	h = append(h, key[:]...)
	h = binary.BigEndian.AppendUint64(h, uint64(d.latest))
	h = binary.BigEndian.AppendUint64(h, d.nextSeq)
	h = binary.BigEndian.AppendUint64(h, uint64(d.set.Len()))
	bw.Write(h)
	var r [snapRecordLen]byte
	d.set.Each(func(fp compact.FP, rec compact.Rec) {
		binary.BigEndian.PutUint64(r[0:], fp.Lo)
		binary.BigEndian.PutUint32(r[8:], fp.Hi)
		binary.BigEndian.PutUint64(r[12:], uint64(rec.T))
		bw.Write(r[:]) // a write error sticks in bw and is reported by Close
	})
	if err := bw.Close(); err != nil {
		return fmt.Errorf("window: write snapshot: %w", err)
	}
	return nil
}

// ReadSnapshot replaces the Dedup's ids, clock, sequence and fingerprint
// key with a snapshot written by WriteSnapshot, reading r to its end. The
// input is checked completely (magic, version, length, checksum, order and
// uniqueness of the records) before anything is replaced; on error, which
// wraps ErrCorruptSnapshot for bad data, the Dedup is unchanged. The clock
// becomes the later of the Dedup's and the snapshot's, and ids whose window
// has closed by it, under this Dedup's window, are dropped.
func (d *Dedup) ReadSnapshot(r io.Reader) error {
	br := compact.NewSnapReader(r, "window", ErrCorruptSnapshot)
	var h [snapHeaderLen]byte
	if err := br.Full(h[:], "header"); err != nil {
		return err
	}
	if string(h[:4]) != snapMagic {
		return fmt.Errorf("window: bad magic %q: %w", h[:4], ErrCorruptSnapshot)
	}
	if h[4] != snapVersion && h[4] != snapVersionV1 {
		return fmt.Errorf("window: unsupported version %d (this build reads versions %d and %d): %w", h[4], snapVersionV1, snapVersion, ErrCorruptSnapshot)
	}
	var key compact.Key
	copy(key[:], h[13:29])
	hasher := compact.NewSipHasher(key)
	if h[4] == snapVersion {
		hasher = compact.NewHasher(key)
	}
	latest := int64(binary.BigEndian.Uint64(h[29:]))
	next := binary.BigEndian.Uint64(h[37:])
	count := binary.BigEndian.Uint64(h[45:])
	if count >= next || count > compact.MaxRecords {
		return fmt.Errorf("window: %d live ids with next sequence %d: %w", count, next, ErrCorruptSnapshot)
	}
	set := compact.NewSet()
	// WithCapacity's index, held as New holds it, and one sized for the
	// ids the snapshot holds, so that loading them does not grow it step
	// by step.
	set.Reserve(d.capacity)
	set.SizeFor(int(count))
	prev := int64(0)
	var rb [snapRecordLen]byte
	for i := range count {
		if err := br.Full(rb[:], "records"); err != nil {
			return fmt.Errorf("%w (record %d of %d)", err, i, count)
		}
		fp := compact.FP{Lo: binary.BigEndian.Uint64(rb[0:]), Hi: binary.BigEndian.Uint32(rb[8:])}
		t := int64(binary.BigEndian.Uint64(rb[12:]))
		if (i > 0 && t < prev) || t > latest {
			return fmt.Errorf("window: record %d at %d is out of time order: %w", i, t, ErrCorruptSnapshot)
		}
		if _, dup := set.Find(fp); dup {
			return fmt.Errorf("window: record %d repeats a fingerprint: %w", i, ErrCorruptSnapshot)
		}
		if err := set.Append(fp, compact.Rec{T: t, Seq: next - count + i}); err != nil {
			return fmt.Errorf("window: read snapshot: %w", err)
		}
		prev = t
	}
	if err := br.Finish(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.key.Store(hasher)
	d.set, d.nextSeq = set, next
	d.advance(max(d.latest, latest)) // the clock never runs backwards
	return nil
}

// SaveSnapshot writes a snapshot to path atomically: to a temporary file
// in the same directory (mode 0600: it holds the fingerprint key), synced,
// then renamed over path, and the directory synced. A crash at any point
// leaves either the previous file or the new one, never a partial file.
func (d *Dedup) SaveSnapshot(path string) error {
	return compact.SaveFile(path, "window", d.WriteSnapshot)
}

// LoadSnapshot restores the Dedup from a file written by SaveSnapshot (see
// ReadSnapshot). A missing file returns an error wrapping fs.ErrNotExist,
// which a caller starting for the first time can ignore; a corrupt or
// truncated one is refused with ErrCorruptSnapshot and changes nothing.
func (d *Dedup) LoadSnapshot(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("window: load snapshot: %w", err)
	}
	defer f.Close()
	if err := d.ReadSnapshot(f); err != nil {
		return fmt.Errorf("%w (file %s)", err, path)
	}
	return nil
}
