package compact

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// Snapshot plumbing shared by window.Dedup and memstore.Store: a stream
// checksummed with CRC-32C (Castagnoli), its checksum as a big-endian
// uint32 after the last byte, and files replaced atomically.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapWriter buffers a snapshot and checksums every byte written through
// it. Write errors stick and are returned by Close.
type SnapWriter struct {
	w   io.Writer
	bw  *bufio.Writer
	crc hash.Hash32
}

// NewSnapWriter returns a SnapWriter writing to w.
func NewSnapWriter(w io.Writer) *SnapWriter {
	crc := crc32.New(castagnoli)
	return &SnapWriter{w: w, bw: bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10), crc: crc}
}

// Write writes p; an error is reported by Close.
func (s *SnapWriter) Write(p []byte) { _, _ = s.bw.Write(p) }

// Close flushes the buffer and appends the checksum of everything written.
func (s *SnapWriter) Close() error {
	if err := s.bw.Flush(); err != nil {
		return err
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], s.crc.Sum32())
	_, err := s.w.Write(sum[:])
	return err
}

// SnapReader reads a snapshot written through a SnapWriter, checksumming
// what it reads. Its errors start with pkg and wrap corrupt when the data
// is truncated or fails the checksum.
type SnapReader struct {
	r       *bufio.Reader
	crc     hash.Hash32
	pkg     string
	corrupt error
}

// NewSnapReader returns a SnapReader reading r.
func NewSnapReader(r io.Reader, pkg string, corrupt error) *SnapReader {
	return &SnapReader{r: bufio.NewReaderSize(r, 64<<10), crc: crc32.New(castagnoli), pkg: pkg, corrupt: corrupt}
}

// Full reads exactly len(p) bytes; what names the part in a truncation
// error.
func (s *SnapReader) Full(p []byte, what string) error {
	if _, err := io.ReadFull(s.r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s: truncated in the %s: %w", s.pkg, what, s.corrupt)
		}
		return fmt.Errorf("%s: read snapshot: %w", s.pkg, err)
	}
	_, _ = s.crc.Write(p)
	return nil
}

// Finish reads the checksum, compares it with the bytes read, and checks
// that nothing follows it.
func (s *SnapReader) Finish() error {
	want := s.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(s.r, sum[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s: truncated in the checksum: %w", s.pkg, s.corrupt)
		}
		return fmt.Errorf("%s: read snapshot: %w", s.pkg, err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return fmt.Errorf("%s: checksum mismatch: stored %#08x, computed %#08x: %w", s.pkg, got, want, s.corrupt)
	}
	if _, err := s.r.ReadByte(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("%s: read snapshot: %w", s.pkg, err)
		}
		return fmt.Errorf("%s: trailing bytes after the checksum: %w", s.pkg, s.corrupt)
	}
	return nil
}

// SaveFile writes a file atomically with write: to a temporary file in
// the same directory (mode 0600, since snapshots hold a fingerprint key),
// synced, then renamed over path, and the directory synced. A crash at any
// point leaves either the previous file or the new one, never a partial
// file. Errors start with pkg.
func SaveFile(path, pkg string, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, base+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s: save snapshot: %w", pkg, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%s: save snapshot: %w", pkg, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: save snapshot: %w", pkg, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("%s: save snapshot: %w", pkg, err)
	}
	if df, err := os.Open(dir); err == nil {
		_ = df.Sync() // best effort: not every file system syncs directories
		_ = df.Close()
	}
	return nil
}
