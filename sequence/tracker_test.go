package sequence_test

import (
	"bytes"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/sequence"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const maxSeq = math.MaxInt32

// bt builds a batch of producer pid on partition 0 stamped at t0.
func bt(pid int64, epoch int16, first, last int32) sequence.Batch {
	return sequence.Batch{ProducerID: pid, Epoch: epoch, FirstSeq: first, LastSeq: last, Timestamp: t0}
}

// step is one batch fed to a tracker and what the broker must answer.
type step struct {
	b    sequence.Batch
	at   time.Duration // now = t0 + at
	want sequence.Verdict
	ooo  *sequence.OutOfOrderError // want this rejection
	err  error                     // want a rejection matching this sentinel
}

func appended(off int64) sequence.Verdict { return sequence.Verdict{Offset: off} }
func dup(off int64) sequence.Verdict      { return sequence.Verdict{Duplicate: true, Offset: off} }
func ooo(expected, got int32) *sequence.OutOfOrderError {
	return &sequence.OutOfOrderError{Expected: expected, Got: got}
}

// stamp returns b with its timestamp moved to t0+d.
func stamp(b sequence.Batch, d time.Duration) sequence.Batch {
	b.Timestamp = t0.Add(d)
	return b
}

// run feeds the steps to a fresh tracker. Every rejection is also checked to
// leave the whole state byte-for-byte unchanged.
func run(t *testing.T, steps []step) *sequence.Tracker {
	t.Helper()
	tr, err := sequence.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		before := tr.Snapshot()
		got, err := tr.Check(s.b, t0.Add(s.at))
		switch {
		case s.ooo != nil:
			var oe *sequence.OutOfOrderError
			if !errors.As(err, &oe) || *oe != *s.ooo {
				t.Fatalf("step %d %+v: got (%+v, %v), want %v", i, s.b, got, err, s.ooo)
			}
			if !errors.Is(err, sequence.ErrOutOfOrder) {
				t.Fatalf("step %d: %v does not match ErrOutOfOrder", i, err)
			}
		case s.err != nil:
			if !errors.Is(err, s.err) {
				t.Fatalf("step %d %+v: got (%+v, %v), want %v", i, s.b, got, err, s.err)
			}
		default:
			if err != nil || got != s.want {
				t.Fatalf("step %d %+v: got (%+v, %v), want %+v", i, s.b, got, err, s.want)
			}
		}
		if err != nil || got.Duplicate {
			if after := tr.Snapshot(); !bytes.Equal(before, after) {
				t.Fatalf("step %d %+v: a rejected or duplicate batch changed the tracker's state", i, s.b)
			}
		}
	}
	return tr
}

func TestTrackerKafkaRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		steps   []step
		wantLEO int64
	}{
		{
			name: "exact retries of each of the last 5 batches are duplicates with the original offset",
			steps: []step{
				{b: bt(1, 0, 0, 1), want: appended(0)},
				{b: bt(1, 0, 2, 3), want: appended(2)},
				{b: bt(1, 0, 4, 5), want: appended(4)},
				{b: bt(1, 0, 6, 7), want: appended(6)},
				{b: bt(1, 0, 8, 9), want: appended(8)},
				{b: bt(1, 0, 4, 5), want: dup(4)},
				{b: bt(1, 0, 0, 1), want: dup(0)},
				{b: bt(1, 0, 8, 9), want: dup(8)},
				{b: bt(1, 0, 2, 3), want: dup(2)},
				{b: bt(1, 0, 6, 7), want: dup(6)},
				{b: bt(1, 0, 10, 10), want: appended(10)},
			},
			wantLEO: 11,
		},
		{
			name: "partial overlaps are out of order",
			steps: []step{
				{b: bt(1, 0, 0, 1), want: appended(0)},
				{b: bt(1, 0, 2, 3), want: appended(2)},
				{b: bt(1, 0, 2, 2), ooo: ooo(4, 2)}, // a prefix of a cached batch
				{b: bt(1, 0, 3, 3), ooo: ooo(4, 3)}, // a suffix
				{b: bt(1, 0, 3, 4), ooo: ooo(4, 3)}, // straddles the end
				{b: bt(1, 0, 1, 2), ooo: ooo(4, 1)}, // straddles two cached batches
				{b: bt(1, 0, 4, 4), want: appended(4)},
			},
			wantLEO: 5,
		},
		{
			name: "supersets of cached batches are out of order",
			steps: []step{
				{b: bt(1, 0, 0, 1), want: appended(0)},
				{b: bt(1, 0, 2, 3), want: appended(2)},
				{b: bt(1, 0, 0, 3), ooo: ooo(4, 0)},
				{b: bt(1, 0, 2, 5), ooo: ooo(4, 2)},
			},
			wantLEO: 4,
		},
		{
			name: "a sixth batch evicts the first: its retry is out of order",
			steps: []step{
				{b: bt(1, 0, 0, 0), want: appended(0)},
				{b: bt(1, 0, 1, 1), want: appended(1)},
				{b: bt(1, 0, 2, 2), want: appended(2)},
				{b: bt(1, 0, 3, 3), want: appended(3)},
				{b: bt(1, 0, 4, 4), want: appended(4)},
				{b: bt(1, 0, 5, 5), want: appended(5)},
				{b: bt(1, 0, 0, 0), ooo: ooo(6, 0)},
				{b: bt(1, 0, 1, 1), want: dup(1)},
				{b: bt(1, 0, 5, 5), want: dup(5)},
			},
			wantLEO: 6,
		},
		{
			name: "a gap is out of order",
			steps: []step{
				{b: bt(1, 0, 0, 0), want: appended(0)},
				{b: bt(1, 0, 2, 2), ooo: ooo(1, 2)},
			},
			wantLEO: 1,
		},
		{
			name: "a lower epoch is fenced, even with a cached batch's sequences",
			steps: []step{
				{b: bt(1, 3, 0, 0), want: appended(0)},
				{b: bt(1, 2, 0, 0), err: sequence.ErrFenced},
				{b: bt(1, 2, 1, 1), err: sequence.ErrFenced},
				{b: bt(1, 3, 0, 0), want: dup(0)},
			},
			wantLEO: 1,
		},
		{
			name: "a higher epoch not starting at 0 is rejected and changes nothing",
			steps: []step{
				{b: bt(1, 0, 0, 0), want: appended(0)},
				{b: bt(1, 0, 1, 1), want: appended(1)},
				{b: bt(1, 1, 5, 5), ooo: ooo(0, 5)},
				{b: bt(1, 1, 2, 2), ooo: ooo(0, 2)}, // even the old epoch's next sequence
				{b: bt(1, 0, 1, 1), want: dup(1)},   // the old epoch and cache are intact
				{b: bt(1, 0, 2, 2), want: appended(2)},
			},
			wantLEO: 3,
		},
		{
			name: "a higher epoch at 0 replaces the epoch and empties the cache",
			steps: []step{
				{b: bt(1, 0, 0, 0), want: appended(0)},
				{b: bt(1, 0, 1, 1), want: appended(1)},
				{b: bt(1, 1, 0, 0), want: appended(2)},
				{b: bt(1, 0, 1, 1), err: sequence.ErrFenced},
				{b: bt(1, 1, 0, 0), want: dup(2)},
				{b: bt(1, 1, 1, 1), want: appended(3)},
				{b: bt(1, 5, 0, 2), want: appended(4)}, // epochs may jump
			},
			wantLEO: 7,
		},
		{
			name: "wraparound: 0 follows 2147483647, 1 does not",
			steps: []step{
				{b: bt(1, 0, maxSeq-1, maxSeq), want: appended(0)},
				{b: bt(1, 0, 1, 1), ooo: ooo(0, 1)},
				{b: bt(1, 0, maxSeq, 0), ooo: ooo(0, maxSeq)},
				{b: bt(1, 0, 0, 0), want: appended(2)},
				{b: bt(1, 0, maxSeq-1, maxSeq), want: dup(0)},
				{b: bt(1, 0, 1, 1), want: appended(3)},
			},
			wantLEO: 4,
		},
		{
			name: "a batch spanning the wrap has LastSeq below FirstSeq",
			steps: []step{
				{b: bt(1, 0, maxSeq-5, maxSeq-3), want: appended(0)},
				{b: bt(1, 0, maxSeq-2, 1), want: appended(3)}, // 2147483645..2147483647, 0, 1: 5 records
				{b: bt(1, 0, maxSeq-2, 1), want: dup(3)},
				{b: bt(1, 0, maxSeq-2, 0), ooo: ooo(2, maxSeq-2)},
				{b: bt(1, 0, 0, 1), ooo: ooo(2, 0)},
				{b: bt(1, 0, 2, 2), want: appended(8)},
			},
			wantLEO: 9,
		},
		{
			name: "an unknown producer is accepted at any sequence and epoch",
			steps: []step{
				{b: bt(1, 0, 0, 0), want: appended(0)},
				{b: bt(2, 9, 1000, 1009), want: appended(1)},
				{b: bt(3, 0, maxSeq, maxSeq), want: appended(11)},
				{b: bt(2, 9, 1010, 1010), want: appended(12)},
			},
			wantLEO: 13,
		},
		{
			name: "producer ids past 32 bits and the largest partition are kept apart",
			steps: []step{
				{b: bt(1<<32, 0, 0, 0), want: appended(0)},
				{b: bt(0, 0, 0, 0), want: appended(1)},
				{b: bt(1<<32|1, 0, 0, 0), want: appended(2)},
				{b: bt(math.MaxInt64, 0, 0, 0), want: appended(3)},
				{b: bt(1<<32, 0, 0, 0), want: dup(0)},
				{b: bt(math.MaxInt64, 0, 1, 1), want: appended(4)},
				{b: bt(1<<32, 0, 2, 2), ooo: ooo(1, 2)},
				{b: sequence.Batch{ProducerID: 1 << 32, Partition: math.MaxInt32, FirstSeq: 9, LastSeq: 9}, want: appended(0)},
			},
			wantLEO: 5,
		},
		{
			name: "idle expiry: state lives until just before 24h and is gone at exactly 24h",
			steps: []step{
				{b: bt(1, 0, 0, 0), want: appended(0)},
				{b: bt(1, 0, 7, 7), at: 24*time.Hour - time.Nanosecond, ooo: ooo(1, 7)},
				{b: bt(1, 0, 0, 0), at: 24*time.Hour - time.Nanosecond, want: dup(0)},
				// Exactly 24h after the last batch's timestamp: forgotten,
				// so even an old retry is appended again (as in Kafka).
				{b: stamp(bt(1, 0, 0, 0), 24*time.Hour), at: 24 * time.Hour, want: appended(1)},
				{b: stamp(bt(1, 0, 1, 1), 24*time.Hour), at: 24 * time.Hour, want: appended(2)},
			},
			wantLEO: 3,
		},
		{
			name: "expiry is measured from the last accepted batch; duplicates do not refresh it",
			steps: []step{
				{b: bt(1, 0, 0, 0), want: appended(0)},
				{b: stamp(bt(1, 0, 0, 0), 23*time.Hour), at: 23 * time.Hour, want: dup(0)},
				{b: stamp(bt(1, 0, 5, 5), 24*time.Hour), at: 24 * time.Hour, want: appended(1)},
			},
			wantLEO: 2,
		},
		{
			name: "a zero Timestamp means now",
			steps: []step{
				{b: sequence.Batch{ProducerID: 1}, at: time.Hour, want: appended(0)},
				{b: sequence.Batch{ProducerID: 1, FirstSeq: 5, LastSeq: 5}, at: 25*time.Hour - time.Nanosecond, ooo: ooo(1, 5)},
				{b: sequence.Batch{ProducerID: 1, FirstSeq: 5, LastSeq: 5}, at: 25 * time.Hour, want: appended(1)},
			},
			wantLEO: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := run(t, tc.steps)
			if got := tr.LogEndOffset(0); got != tc.wantLEO {
				t.Fatalf("log end offset %d, want %d", got, tc.wantLEO)
			}
		})
	}
}

func TestTrackerPartitionsAreIndependent(t *testing.T) {
	t.Parallel()
	tr, err := sequence.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	b := bt(7, 0, 0, 2)
	for part := range 3 {
		b.Partition = int32(part)
		mustCheck(t, tr, b, t0, appended(0))
	}
	b.Partition = 1
	mustCheck(t, tr, b, t0, dup(0)) // a retry on partition 1
	other := bt(8, 0, 0, 0)
	other.Partition = 1
	mustCheck(t, tr, other, t0, appended(3)) // a second producer on partition 1
	if tr.LogEndOffset(1) != 4 || tr.LogEndOffset(2) != 3 || tr.LogEndOffset(9) != 0 {
		t.Fatalf("log end offsets %d %d %d", tr.LogEndOffset(1), tr.LogEndOffset(2), tr.LogEndOffset(9))
	}
	if tr.Len() != 4 {
		t.Fatalf("Len %d, want 4", tr.Len())
	}
}

func TestTrackerInvalidBatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		b     sequence.Batch
	}{
		{"ProducerID", sequence.Batch{ProducerID: -1}},
		{"Epoch", sequence.Batch{Epoch: -1}},
		{"Partition", sequence.Batch{Partition: -3}},
		{"FirstSeq", sequence.Batch{FirstSeq: -1}},
		{"LastSeq", sequence.Batch{LastSeq: math.MinInt32}},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			tr, _ := sequence.NewTracker()
			_, err := tr.Check(tc.b, t0)
			if !errors.Is(err, sequence.ErrInvalidBatch) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want ErrInvalidBatch naming %s", err, tc.field)
			}
			if tr.Len() != 0 || tr.LogEndOffset(tc.b.Partition) != 0 {
				t.Fatal("an invalid batch left state behind")
			}
		})
	}
}

func TestTrackerOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []sequence.Option{sequence.WithIdleExpiry(0), sequence.WithIdleExpiry(-time.Second), sequence.WithTable("t"), nil} {
		if _, err := sequence.NewTracker(o); !errors.Is(err, idem.ErrInvalidOption) || !strings.HasPrefix(err.Error(), "sequence: ") {
			t.Errorf("got %v, want a sequence: error wrapping idem.ErrInvalidOption", err)
		}
	}
	tr, err := sequence.NewTracker(sequence.WithIdleExpiry(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mustCheck(t, tr, bt(1, 0, 0, 0), t0, appended(0))
	mustCheck(t, tr, bt(1, 0, 9, 9), t0.Add(time.Minute), appended(1)) // expired after one minute
}

func mustCheck(t *testing.T, tr *sequence.Tracker, b sequence.Batch, now time.Time, want sequence.Verdict) {
	t.Helper()
	if got, err := tr.Check(b, now); err != nil || got != want {
		t.Fatalf("Check(%+v) = (%+v, %v), want %+v", b, got, err, want)
	}
}

func TestTrackerSweep(t *testing.T) {
	t.Parallel()
	tr, _ := sequence.NewTracker()
	mustCheck(t, tr, bt(1, 0, 0, 0), t0, appended(0))
	mustCheck(t, tr, stamp(bt(2, 0, 0, 0), time.Hour), t0.Add(time.Hour), appended(1))
	if n := tr.Sweep(t0.Add(24*time.Hour - 1)); n != 0 {
		t.Fatalf("swept %d before expiry", n)
	}
	if n := tr.Sweep(t0.Add(24 * time.Hour)); n != 1 || tr.Len() != 1 {
		t.Fatalf("swept %d, Len %d; want 1, 1", n, tr.Len())
	}
	if tr.LogEndOffset(0) != 2 {
		t.Fatal("Sweep must keep the log end offset")
	}
	// The swept producer is unknown again: any sequence is accepted.
	mustCheck(t, tr, stamp(bt(1, 0, 40, 40), 24*time.Hour), t0.Add(24*time.Hour), appended(2))
}

func TestTrackerConcurrentRetries(t *testing.T) {
	t.Parallel()
	tr, _ := sequence.NewTracker()
	const producers, batches, retries = 4, 200, 3
	done := make(chan int, producers*retries)
	for p := range producers {
		for range retries {
			go func() {
				appends := 0
				for s := range batches {
					// Every goroutine of a producer sends the same batches
					// in order; whichever arrives first appends.
					for {
						v, err := tr.Check(bt(int64(p), 0, int32(s), int32(s)), t0)
						if err == nil {
							if !v.Duplicate {
								appends++
							}
							break
						}
						var oe *sequence.OutOfOrderError
						if !errors.As(err, &oe) {
							panic(err)
						}
						if oe.Expected > int32(s) {
							break // siblings are more than 5 batches ahead
						}
						runtime.Gosched() // a sibling has not appended s-1 yet
					}
				}
				done <- appends
			}()
		}
	}
	total := 0
	for range producers * retries {
		total += <-done
	}
	if total != producers*batches || tr.LogEndOffset(0) != producers*batches {
		t.Fatalf("%d appends, log end offset %d; want %d each", total, tr.LogEndOffset(0), producers*batches)
	}
}
