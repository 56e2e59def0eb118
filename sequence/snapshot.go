package sequence

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// Snapshot encoding, version 1. All integers are big-endian and fixed width.
//
//	magic      4 bytes  "IDSQ"
//	version    uint8    1
//	partitions uint32   count P, then P records in increasing partition order:
//	    partition int32, log end offset int64
//	producers  uint32   count N, then N records in increasing (producer, partition) order:
//	    producer int64, partition int32, epoch int16, last timestamp int64 (Unix ns),
//	    batches uint8 (1..5), then per cached batch, oldest first:
//	        first sequence int32, last sequence int32, first offset int64
//	checksum   uint32   CRC-32C (Castagnoli) of every preceding byte
//
// The encoding is canonical: equal tracker states encode to equal bytes.
// The idle expiry is configuration, not state, and is not encoded.
const (
	snapshotMagic   = "IDSQ"
	snapshotVersion = 1

	snapHeaderLen    = len(snapshotMagic) + 1
	snapPartitionLen = 4 + 8
	snapProducerLen  = 8 + 4 + 2 + 8 + 1
	snapBatchLen     = 4 + 4 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot encodes the tracker's whole state (every producer's epoch, cached
// batches and last timestamp, and every partition's log end offset) in the
// documented, versioned binary format above. Writing the snapshot
// durably is the caller's job; state accepted after the snapshot is lost in a
// crash, and a restored tracker then treats later retries of those batches as
// a broker treats them after losing state (see Check).
func (t *Tracker) Snapshot() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()

	parts := make([]int32, 0, len(t.partitions))
	for id := range t.partitions {
		parts = append(parts, id)
	}
	slices.Sort(parts)
	keys := make([]producerKey, 0, t.producers.len())
	for k := range t.producers.all() {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)

	size := snapHeaderLen + 4 + len(parts)*snapPartitionLen + 4 + 4
	for _, k := range keys {
		p, _ := t.producers.get(k)
		size += snapProducerLen + int(p.n)*snapBatchLen
	}
	b := make([]byte, 0, size)
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(parts)))
	for _, id := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(id))
		b = binary.BigEndian.AppendUint64(b, uint64(t.partitions[id].end))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		p, _ := t.producers.get(k)
		b = binary.BigEndian.AppendUint64(b, uint64(k.producer))
		b = binary.BigEndian.AppendUint32(b, uint32(k.partition))
		b = binary.BigEndian.AppendUint16(b, uint16(p.epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(p.lastTS))
		b = append(b, p.n)
		for i := uint8(0); i < p.n; i++ {
			c := p.batches[(p.head+i)%CachedBatches]
			b = binary.BigEndian.AppendUint64(b, c.seqs) // first then last, 4 bytes each
			b = binary.BigEndian.AppendUint64(b, uint64(c.offset))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func compareKeys(a, b producerKey) int {
	if c := cmp.Compare(a.producer, b.producer); c != 0 {
		return c
	}
	return cmp.Compare(a.partition, b.partition)
}

// Restore replaces the tracker's whole state with a snapshot made by
// Snapshot. The input is checked completely (magic, version, checksum,
// ranges, ordering, and that every producer's cached batches are contiguous
// and lie inside its partition's log) before anything is replaced: on error,
// which wraps ErrCorruptSnapshot, the tracker is unchanged.
func (t *Tracker) Restore(data []byte) error {
	producers, partitions, err := decodeSnapshot(data)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.producers, t.partitions = producers, partitions
	return nil
}

// reader walks a byte slice; the caller has checked lengths beforehand.
type reader struct {
	b   []byte
	off int
}

func (r *reader) left() int { return len(r.b) - r.off }
func (r *reader) u8() uint8 { v := r.b[r.off]; r.off++; return v }
func (r *reader) u16() uint16 {
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}
func (r *reader) u32() uint32 {
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}
func (r *reader) u64() uint64 {
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("sequence: "+format+": %w", append(args, ErrCorruptSnapshot)...)
}

func decodeSnapshot(data []byte) (producerMap[*producerState], map[int32]*partitionLog, error) {
	if len(data) < snapHeaderLen+4+4+4 {
		return producerMap[*producerState]{}, nil, corrupt("%d bytes is shorter than an empty snapshot", len(data))
	}
	if string(data[:len(snapshotMagic)]) != snapshotMagic {
		return producerMap[*producerState]{}, nil, corrupt("bad magic %q", data[:len(snapshotMagic)])
	}
	if v := data[len(snapshotMagic)]; v != snapshotVersion {
		return producerMap[*producerState]{}, nil, corrupt("unsupported version %d (this build reads version %d)", v, snapshotVersion)
	}
	body := data[:len(data)-4]
	if want, got := binary.BigEndian.Uint32(data[len(body):]), crc32.Checksum(body, castagnoli); want != got {
		return producerMap[*producerState]{}, nil, corrupt("checksum mismatch: stored %#08x, computed %#08x", want, got)
	}
	r := &reader{b: body, off: snapHeaderLen}

	np := int(r.u32())
	if np > (r.left()-4)/snapPartitionLen {
		return producerMap[*producerState]{}, nil, corrupt("partition count %d exceeds the data", np)
	}
	partitions := make(map[int32]*partitionLog, np)
	prev := int64(-1)
	for range np {
		id, end := int32(r.u32()), int64(r.u64())
		if int64(id) <= prev {
			return producerMap[*producerState]{}, nil, corrupt("partition %d out of order or repeated", id)
		}
		if end < 0 {
			return producerMap[*producerState]{}, nil, corrupt("partition %d has negative log end offset %d", id, end)
		}
		prev = int64(id)
		partitions[id] = &partitionLog{end: end}
	}

	nk := int(r.u32())
	if nk > r.left()/(snapProducerLen+snapBatchLen) {
		return producerMap[*producerState]{}, nil, corrupt("producer count %d exceeds the data", nk)
	}
	producers := newProducerMap[*producerState](nk)
	var last producerKey
	for i := range nk {
		if r.left() < snapProducerLen {
			return producerMap[*producerState]{}, nil, corrupt("producer %d of %d truncated", i, nk)
		}
		k := producerKey{producer: int64(r.u64()), partition: int32(r.u32())}
		p := &producerState{epoch: int16(r.u16()), lastTS: int64(r.u64()), n: r.u8()}
		if err := checkProducer(k, p, i > 0 && compareKeys(last, k) >= 0); err != nil {
			return producerMap[*producerState]{}, nil, err
		}
		last = k
		if r.left() < int(p.n)*snapBatchLen {
			return producerMap[*producerState]{}, nil, corrupt("producer %d partition %d: batches truncated", k.producer, k.partition)
		}
		for j := range p.n {
			p.batches[j] = cached{seqs: r.u64(), offset: int64(r.u64())}
		}
		p.lastSeq = p.batches[p.n-1].last()
		p.log = partitions[k.partition]
		if err := checkBatches(k, p); err != nil {
			return producerMap[*producerState]{}, nil, err
		}
		producers.set(k, p)
	}
	if r.left() != 0 {
		return producerMap[*producerState]{}, nil, corrupt("%d trailing bytes", r.left())
	}
	return producers, partitions, nil
}

func checkProducer(k producerKey, p *producerState, unordered bool) error {
	switch {
	case unordered:
		return corrupt("producer %d partition %d out of order or repeated", k.producer, k.partition)
	case k.producer < 0 || k.partition < 0 || p.epoch < 0:
		return corrupt("producer %d partition %d epoch %d: negative field", k.producer, k.partition, p.epoch)
	case p.n < 1 || p.n > CachedBatches:
		return corrupt("producer %d partition %d: %d cached batches, want 1 to %d", k.producer, k.partition, p.n, CachedBatches)
	}
	return nil
}

// checkBatches verifies the invariants Check maintains: the cached batches
// of one producer are contiguous in sequence, their offsets increase, and
// they lie inside the partition's log.
func checkBatches(k producerKey, p *producerState) error {
	if p.log == nil {
		return corrupt("producer %d refers to partition %d, which has no log", k.producer, k.partition)
	}
	minOff := int64(0)
	for j := range p.n {
		c := p.batches[j]
		if c.first() < 0 || c.last() < 0 {
			return corrupt("producer %d partition %d: negative sequence in batch %d", k.producer, k.partition, j)
		}
		if j > 0 && c.first() != nextSeq(p.batches[j-1].last()) {
			return corrupt("producer %d partition %d: batch %d does not follow batch %d", k.producer, k.partition, j, j-1)
		}
		n := Batch{FirstSeq: c.first(), LastSeq: c.last()}.Records()
		if c.offset < minOff || c.offset > p.log.end-n {
			return corrupt("producer %d partition %d: batch %d at offset %d overlaps another or lies outside the log", k.producer, k.partition, j, c.offset)
		}
		minOff = c.offset + n
	}
	return nil
}
