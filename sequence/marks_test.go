package sequence_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem/sequence"
)

// msg is one consumer-side delivery and what the mark must answer.
type msg struct {
	producer int64
	epoch    int16
	part     int32
	seq      int32
	apply    bool
	ooo      *sequence.OutOfOrderError
	err      error
}

// markCases are shared by HighWater and every SQLMarks dialect: the rules
// must not depend on where the mark lives.
var markCases = []struct {
	name string
	msgs []msg
}{
	{"unknown producer starts anywhere; redeliveries are duplicates", []msg{
		{producer: 1, seq: 5, apply: true},
		{producer: 1, seq: 5},
		{producer: 1, seq: 4},
		{producer: 1, seq: 0},
		{producer: 1, seq: 6, apply: true},
		{producer: 1, seq: 6},
	}},
	{"a gap is refused and moves nothing", []msg{
		{producer: 1, seq: 0, apply: true},
		{producer: 1, seq: 2, ooo: ooo(1, 2)},
		{producer: 1, seq: 1, apply: true},
		{producer: 1, seq: 2, apply: true},
	}},
	{"epochs: older is fenced, newer must start at 0", []msg{
		{producer: 1, epoch: 2, seq: 9, apply: true},
		{producer: 1, epoch: 1, seq: 10, err: sequence.ErrFenced},
		{producer: 1, epoch: 3, seq: 10, ooo: ooo(0, 10)},
		{producer: 1, epoch: 2, seq: 10, apply: true},
		{producer: 1, epoch: 3, seq: 0, apply: true},
		{producer: 1, epoch: 3, seq: 0},
		{producer: 1, epoch: 2, seq: 11, err: sequence.ErrFenced},
	}},
	{"wraparound: 0 follows 2147483647", []msg{
		{producer: 1, seq: maxSeq - 1, apply: true},
		{producer: 1, seq: maxSeq, apply: true},
		{producer: 1, seq: 1, ooo: ooo(0, 1)},
		{producer: 1, seq: 0, apply: true},
		{producer: 1, seq: maxSeq},     // behind, across the wrap
		{producer: 1, seq: maxSeq - 9}, // further behind
		{producer: 1, seq: 1, apply: true},
	}},
	{"ahead and behind are judged within half the sequence space", []msg{
		{producer: 1, seq: 10, apply: true},
		{producer: 1, seq: 10 + (1 << 30) - 1, ooo: ooo(11, 10+(1<<30)-1)},
		{producer: 1, seq: 10 + (1 << 30)}, // 2^30 ahead counts as 2^30 behind
	}},
	{"producers and partitions are independent", []msg{
		{producer: 1, part: 0, seq: 3, apply: true},
		{producer: 1, part: 1, seq: 3, apply: true},
		{producer: 2, part: 0, seq: 3, apply: true},
		{producer: 1, part: 1, seq: 3},
		{producer: 2, part: 0, seq: 4, apply: true},
	}},
	{"invalid messages", []msg{
		{producer: -1, seq: 0, err: sequence.ErrInvalidBatch},
		{producer: 1, seq: -1, err: sequence.ErrInvalidBatch},
		{producer: 1, epoch: -1, err: sequence.ErrInvalidBatch},
		{producer: 1, part: -1, err: sequence.ErrInvalidBatch},
		{producer: 1, seq: 7, apply: true},
	}},
}

func checkMsg(t *testing.T, i int, m msg, apply bool, err error) {
	t.Helper()
	switch {
	case m.ooo != nil:
		var oe *sequence.OutOfOrderError
		if !errors.As(err, &oe) || *oe != *m.ooo || apply {
			t.Fatalf("message %d %+v: got (%v, %v), want %v", i, m, apply, err, m.ooo)
		}
	case m.err != nil:
		if !errors.Is(err, m.err) || apply {
			t.Fatalf("message %d %+v: got (%v, %v), want %v", i, m, apply, err, m.err)
		}
	default:
		if err != nil || apply != m.apply {
			t.Fatalf("message %d %+v: got (%v, %v), want apply=%v", i, m, apply, err, m.apply)
		}
	}
}

func TestHighWater(t *testing.T) {
	t.Parallel()
	for _, tc := range markCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := sequence.NewHighWater()
			for i, m := range tc.msgs {
				// Check must agree with Accept and record nothing.
				apply, err := h.Check(m.producer, m.epoch, m.part, m.seq)
				checkMsg(t, i, m, apply, err)
				apply2, err2 := h.Check(m.producer, m.epoch, m.part, m.seq)
				if apply2 != apply || (err2 == nil) != (err == nil) {
					t.Fatalf("message %d: Check recorded something", i)
				}
				apply, err = h.Accept(m.producer, m.epoch, m.part, m.seq)
				checkMsg(t, i, m, apply, err)
				if e, s, ok := h.Mark(m.producer, m.part); apply && (!ok || e != m.epoch || s != m.seq) {
					t.Fatalf("message %d applied but the mark is (%d, %d, %v)", i, e, s, ok)
				}
			}
		})
	}
}

func TestHighWaterConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	h := sequence.NewHighWater()
	const goroutines, msgs = 8, 500
	var applied atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for s := range int32(msgs) {
				for {
					apply, err := h.Accept(1, 0, 0, s)
					if err == nil {
						if apply {
							applied.Add(1)
						}
						break
					}
					// A gap: a sibling has not accepted s-1 yet.
				}
			}
		})
	}
	wg.Wait()
	if applied.Load() != msgs || h.Len() != 1 {
		t.Fatalf("%d applied, Len %d; want %d applied once each", applied.Load(), h.Len(), msgs)
	}
}
