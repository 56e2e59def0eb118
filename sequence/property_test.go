package sequence_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idem-go/idem/sequence"
)

// refModel is a deliberately plain statement of the broker rules: every
// accepted batch is kept in a growing slice and the last five are found by
// slicing; sequence arithmetic is done modulo 2^31 in int64. It shares no
// code with Tracker.
type refModel struct {
	idle      time.Duration
	producers map[[2]int64]*refProducer
	logEnd    map[int32]int64
}

type refProducer struct {
	epoch   int16
	batches []refBatch
	lastTS  time.Time
}

type refBatch struct {
	first, last int32
	offset      int64
}

const space = int64(1) << 31

func newRefModel(idle time.Duration) *refModel {
	return &refModel{idle: idle, producers: map[[2]int64]*refProducer{}, logEnd: map[int32]int64{}}
}

func (m *refModel) check(b sequence.Batch, now time.Time) (sequence.Verdict, error) {
	if b.ProducerID < 0 || b.Epoch < 0 || b.Partition < 0 || b.FirstSeq < 0 || b.LastSeq < 0 {
		return sequence.Verdict{}, sequence.ErrInvalidBatch
	}
	key := [2]int64{b.ProducerID, int64(b.Partition)}
	p := m.producers[key]
	if p != nil && now.Sub(p.lastTS) >= m.idle {
		p = nil
	}
	if p != nil {
		if b.Epoch == p.epoch {
			recent := p.batches[max(0, len(p.batches)-5):]
			for _, c := range recent {
				if c.first == b.FirstSeq && c.last == b.LastSeq {
					return sequence.Verdict{Duplicate: true, Offset: c.offset}, nil
				}
			}
		}
		if b.Epoch < p.epoch {
			return sequence.Verdict{}, sequence.ErrFenced
		}
		if b.Epoch > p.epoch {
			if b.FirstSeq != 0 {
				return sequence.Verdict{}, &sequence.OutOfOrderError{Expected: 0, Got: b.FirstSeq}
			}
			p = nil // a fresh cache for the new epoch
		} else {
			want := int32((int64(p.batches[len(p.batches)-1].last) + 1) % space)
			if b.FirstSeq != want {
				return sequence.Verdict{}, &sequence.OutOfOrderError{Expected: want, Got: b.FirstSeq}
			}
		}
	}
	if p == nil {
		p = &refProducer{epoch: b.Epoch}
		m.producers[key] = p
	}
	ts := b.Timestamp
	if ts.IsZero() {
		ts = now
	}
	n := (int64(b.LastSeq)-int64(b.FirstSeq)+space)%space + 1
	off := m.logEnd[b.Partition]
	m.logEnd[b.Partition] = off + n
	p.batches = append(p.batches, refBatch{first: b.FirstSeq, last: b.LastSeq, offset: off})
	p.lastTS = ts
	return sequence.Verdict{Offset: off}, nil
}

// sameOutcome compares a Tracker answer with the model's.
func sameOutcome(gotV sequence.Verdict, gotErr error, wantV sequence.Verdict, wantErr error) error {
	var we, ge *sequence.OutOfOrderError
	switch {
	case wantErr == nil:
		if gotErr != nil || gotV != wantV {
			return fmt.Errorf("got (%+v, %v), want %+v", gotV, gotErr, wantV)
		}
	case errors.As(wantErr, &we):
		if !errors.As(gotErr, &ge) || *ge != *we {
			return fmt.Errorf("got (%+v, %v), want %v", gotV, gotErr, wantErr)
		}
	default:
		if !errors.Is(gotErr, wantErr) {
			return fmt.Errorf("got (%+v, %v), want %v", gotV, gotErr, wantErr)
		}
	}
	return nil
}

// TestTrackerMatchesModel drives a Tracker and the model with random streams
// of batches from a few producers: next-in-line batches (some spanning the
// wrap), retries of recent and evicted batches, gaps, overlaps, epoch bumps
// (valid and not), fenced epochs, invalid batches, and clock jumps across
// the idle expiry. Every so often the tracker is replaced by one restored
// from its snapshot.
func TestTrackerMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		idle := time.Duration(rapid.IntRange(1, 100).Draw(t, "idleHours")) * time.Hour
		tr, err := sequence.NewTracker(sequence.WithIdleExpiry(idle))
		if err != nil {
			t.Fatal(err)
		}
		model := newRefModel(idle)
		now := t0
		// The client side: what each producer sent, so retries can be drawn.
		type client struct {
			epoch int16
			next  int32
			sent  []sequence.Batch
		}
		clients := map[[2]int64]*client{}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for i := range steps {
			pid := rapid.SampledFrom([]int64{0, 1, 1 << 40}).Draw(t, "pid") // ids past 32 bits take another path
			part := int32(rapid.IntRange(0, 1).Draw(t, "partition"))
			c := clients[[2]int64{pid, int64(part)}]
			if c == nil {
				// Some producers start just below the wrap.
				start := rapid.SampledFrom([]int32{0, 17, maxSeq - 6, maxSeq}).Draw(t, "start")
				c = &client{next: start}
				clients[[2]int64{pid, int64(part)}] = c
			}
			size := int32(rapid.IntRange(1, 4).Draw(t, "size"))
			mk := func(epoch int16, first int32, size int32) sequence.Batch {
				last := int32((int64(first) + int64(size) - 1) % space)
				return sequence.Batch{ProducerID: pid, Epoch: epoch, Partition: part, FirstSeq: first, LastSeq: last, Timestamp: now}
			}
			var b sequence.Batch
			switch kind := rapid.IntRange(0, 11).Draw(t, "kind"); kind {
			case 0, 1, 2, 3: // next in line
				b = mk(c.epoch, c.next, size)
			case 4, 5: // retry of something sent, possibly evicted
				if len(c.sent) == 0 {
					b = mk(c.epoch, c.next, size)
					break
				}
				back := rapid.IntRange(1, min(8, len(c.sent))).Draw(t, "back")
				b = c.sent[len(c.sent)-back]
				b.Timestamp = now
			case 6: // gap or overlap around the next sequence
				delta := int64(rapid.IntRange(-3, 3).Draw(t, "delta"))
				b = mk(c.epoch, int32(((int64(c.next)+delta)%space+space)%space), size)
			case 7: // new epoch, usually at 0
				c.epoch++
				first := int32(0)
				if rapid.IntRange(0, 3).Draw(t, "badEpochStart") == 0 {
					first = c.next
				}
				b = mk(c.epoch, first, size)
			case 8: // an older epoch
				b = mk(c.epoch-1, c.next, size)
			case 9: // the clock moves, sometimes past the idle expiry
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(idle)+int64(time.Hour)).Draw(t, "advance")))
				b = mk(c.epoch, c.next, size)
			case 10: // zero timestamp, or an invalid field
				b = mk(c.epoch, c.next, size)
				b.Timestamp = time.Time{}
				if rapid.Bool().Draw(t, "invalid") {
					b.FirstSeq = -1
				}
			case 11: // snapshot and restore into a fresh tracker
				restored, err := sequence.NewTracker(sequence.WithIdleExpiry(idle))
				if err != nil {
					t.Fatal(err)
				}
				if err := restored.Restore(tr.Snapshot()); err != nil {
					t.Fatalf("restore of a live snapshot: %v", err)
				}
				tr = restored
				b = mk(c.epoch, c.next, size)
			}
			if b.Epoch < 0 {
				b.Epoch = 0
			}
			wantV, wantErr := model.check(b, now)
			gotV, gotErr := tr.Check(b, now)
			if err := sameOutcome(gotV, gotErr, wantV, wantErr); err != nil {
				t.Fatalf("step %d, batch %+v: %v", i, b, err)
			}
			if gotErr == nil && !gotV.Duplicate {
				c.sent = append(c.sent, b)
				c.epoch = b.Epoch
				c.next = int32((int64(b.LastSeq) + 1) % space)
			}
		}
		for part, want := range model.logEnd {
			if got := tr.LogEndOffset(part); got != want {
				t.Fatalf("partition %d log end offset %d, model %d", part, got, want)
			}
		}
	})
}
