package sequence_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/idem-go/idem/sequence"
)

func withCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// TestSnapshotFormat pins the documented version-1 layout byte for byte.
func TestSnapshotFormat(t *testing.T) {
	t.Parallel()
	tr, _ := sequence.NewTracker()
	mustCheck(t, tr, sequence.Batch{ProducerID: 7, Partition: 2, FirstSeq: 5, LastSeq: 5, Timestamp: t0}, t0, appended(0))

	be := binary.BigEndian
	want := []byte("IDSQ\x01")
	want = be.AppendUint32(want, 1)                     // one partition
	want = be.AppendUint32(want, 2)                     // partition 2
	want = be.AppendUint64(want, 1)                     // log end offset 1
	want = be.AppendUint32(want, 1)                     // one producer state
	want = be.AppendUint64(want, 7)                     // producer 7
	want = be.AppendUint32(want, 2)                     // partition 2
	want = be.AppendUint16(want, 0)                     // epoch 0
	want = be.AppendUint64(want, uint64(t0.UnixNano())) // last timestamp
	want = append(want, 1)                              // one cached batch
	want = be.AppendUint32(want, 5)                     // first sequence
	want = be.AppendUint32(want, 5)                     // last sequence
	want = be.AppendUint64(want, 0)                     // first offset
	want = withCRC(want)
	if got := tr.Snapshot(); !bytes.Equal(got, want) {
		t.Fatalf("snapshot\n got %x\nwant %x", got, want)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	tr, _ := sequence.NewTracker()
	for s := int32(0); s < 8; s++ { // more than five batches: the ring has wrapped
		mustCheck(t, tr, bt(1, 0, 2*s, 2*s+1), t0, appended(int64(2*s)))
	}
	mustCheck(t, tr, bt(2, 3, maxSeq-1, 0), t0, appended(16))
	mustCheck(t, tr, bt(1<<40, 0, 0, 0), t0, appended(19))
	snap := tr.Snapshot()

	restored, _ := sequence.NewTracker()
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if again := restored.Snapshot(); !bytes.Equal(again, snap) {
		t.Fatal("Snapshot after Restore differs from the input")
	}
	for _, tr := range []*sequence.Tracker{tr, restored} {
		mustCheck(t, tr, bt(1, 0, 6, 7), t0, dup(6)) // oldest still cached
		if _, err := tr.Check(bt(1, 0, 4, 5), t0); !errors.Is(err, sequence.ErrOutOfOrder) {
			t.Fatalf("evicted batch: %v", err)
		}
		mustCheck(t, tr, bt(2, 3, 1, 1), t0, appended(20))
		mustCheck(t, tr, bt(1<<40, 0, 0, 0), t0, dup(19))
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	t.Parallel()
	good, _ := sequence.NewTracker()
	mustCheck(t, good, bt(1, 0, 0, 1), t0, appended(0))
	mustCheck(t, good, bt(1, 0, 2, 2), t0, appended(2))
	valid := good.Snapshot()
	body := valid[:len(valid)-4]

	// Corruptions with a correct checksum, to reach the semantic checks.
	// Offsets into body: header 5, partitions 4+12, producer count 4, then
	// the producer record (8+4+2+8+1) and its batches (16 each).
	const prod = 5 + 4 + 12 + 4
	const batches = prod + 23
	patch := func(off int, b ...byte) []byte {
		c := bytes.Clone(body)
		copy(c[off:], b)
		return withCRC(c)
	}
	tests := map[string][]byte{
		"empty":             nil,
		"short":             []byte("IDSQ"),
		"bad magic":         append([]byte("XDSQ"), valid[4:]...),
		"future version":    patch(4, 2),
		"bad checksum":      append(bytes.Clone(body), 0, 0, 0, 0),
		"truncated":         withCRC(bytes.Clone(body[:len(body)-3])),
		"trailing bytes":    withCRC(append(bytes.Clone(body), 0)),
		"huge count":        patch(5, 0xff, 0xff, 0xff, 0xff),
		"negative producer": patch(prod, 0x80),
		"six batches":       patch(prod+22, 6),
		"zero batches":      withCRC(append(bytes.Clone(body[:prod+22]), 0)),
		"non-contiguous":    patch(batches+16, 0, 0, 0, 3, 0, 0, 0, 3), // second batch 3..3 after 0..1
		"beyond the log":    patch(batches+16+8, 0, 0, 0, 0, 0, 0, 0, 9),
		"overlapping":       patch(batches+16+8, 0, 0, 0, 0, 0, 0, 0, 1),
		"unknown partition": patch(5+4, 0, 0, 0, 9),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr, _ := sequence.NewTracker()
			mustCheck(t, tr, bt(5, 0, 0, 0), t0, appended(0))
			before := tr.Snapshot()
			err := tr.Restore(data)
			if !errors.Is(err, sequence.ErrCorruptSnapshot) {
				t.Fatalf("Restore = %v, want ErrCorruptSnapshot", err)
			}
			if !bytes.Equal(tr.Snapshot(), before) {
				t.Fatal("a failed Restore changed the tracker")
			}
		})
	}
}

func FuzzRestore(f *testing.F) {
	empty, _ := sequence.NewTracker()
	f.Add(empty.Snapshot())
	tr, _ := sequence.NewTracker()
	for s := int32(0); s < 7; s++ {
		_, _ = tr.Check(bt(int64(s%3), int16(s%2), 0, s), t0.Add(time.Duration(s)))
	}
	_, _ = tr.Check(sequence.Batch{ProducerID: 9, Partition: 4, FirstSeq: maxSeq, LastSeq: 2}, t0)
	f.Add(tr.Snapshot())
	f.Add([]byte("IDSQ\x01garbage"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		restoreFuzzed(t, data)
		// Random bytes rarely carry a valid checksum; fix it up so the
		// structural checks behind it are fuzzed too.
		if len(data) >= 4 {
			restoreFuzzed(t, withCRC(bytes.Clone(data[:len(data)-4])))
		}
	})
}

func restoreFuzzed(t *testing.T, data []byte) {
	tr, _ := sequence.NewTracker()
	if err := tr.Restore(data); err != nil {
		if !errors.Is(err, sequence.ErrCorruptSnapshot) {
			t.Fatalf("error %v does not wrap ErrCorruptSnapshot", err)
		}
		if tr.Len() != 0 {
			t.Fatal("a failed Restore left state behind")
		}
		return
	}
	// Accepted input is canonical and usable.
	if again := tr.Snapshot(); !bytes.Equal(again, data) {
		t.Fatalf("re-encoding differs:\n in %x\nout %x", data, again)
	}
	for pid := int64(0); pid < 3; pid++ {
		_, _ = tr.Check(sequence.Batch{ProducerID: pid, FirstSeq: 1, LastSeq: 1}, t0)
	}
}
