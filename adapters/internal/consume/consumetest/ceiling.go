package consumetest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume/settest"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// Sizes records the size of every batch a set handler received.
type Sizes struct {
	mu sync.Mutex
	n  []int
}

// Record wraps set so that s records each batch's size before set runs.
func Record[M any](s *Sizes, set func(context.Context, *sql.Tx, []M) error) func(context.Context, *sql.Tx, []M) error {
	return func(ctx context.Context, tx *sql.Tx, msgs []M) error {
		s.mu.Lock()
		s.n = append(s.n, len(msgs))
		s.mu.Unlock()
		return set(ctx, tx, msgs)
	}
}

// All returns the sizes recorded so far.
func (s *Sizes) All() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.n...)
}

// SetInsert writes one effects row per message, (key(m), data(m)), with
// one multi-row INSERT: the set handler of the adapters' benchmarks.
func SetInsert[M any](key, data func(M) string) func(context.Context, *sql.Tx, []M) error {
	return func(ctx context.Context, tx *sql.Tx, msgs []M) error {
		return settest.Insert(ctx, tx, Insert, msgs, func(m M) []any { return []any{key(m), data(m)} })
	}
}

// StoreOnly is the ceiling of a consumer: the same records fed straight
// into a fresh inbox of the same kind ([NewEffects]) with
// inbox.ProcessBatchSet and the same set handler's statement, in exactly
// the batch sizes that the consumer formed, with no broker at all. It
// returns the time from the first batch to the last commit.
func StoreOnly(tb testing.TB, keys []string, data string, sizes []int) time.Duration {
	tb.Helper()
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != len(keys) {
		tb.Fatalf("store only: batch sizes add up to %d records, want %d", total, len(keys))
	}
	e := NewEffects(tb)
	set := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		return settest.Insert(ctx, tx, Insert, fresh, func(m inbox.Message) []any { return []any{m.Key, data} })
	}
	ctx := context.Background()
	applied, lo := 0, 0
	start := time.Now()
	for _, n := range sizes {
		msgs := make([]inbox.Message, n)
		for i, k := range keys[lo : lo+n] {
			msgs[i] = inbox.Message{Key: k}
		}
		lo += n
		results, err := e.In.ProcessBatchSet(ctx, msgs, set, nil)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range results {
			if r.Applied {
				applied++
			}
		}
	}
	d := time.Since(start)
	if applied != len(keys) {
		tb.Fatalf("store only: %d of %d records applied", applied, len(keys))
	}
	return d
}

// VsStore is the speed check every broker adapter runs: per iteration, n
// records with time-ordered ids (UUIDv7 text) and a 100-byte payload are
// published with publish, consumed by the consumer that newRun builds
// (over a fresh [NewEffects] inbox, with the given set handler, one
// multi-row INSERT per batch, and the observer), and acked; then the same
// records go straight into a fresh inbox ([StoreOnly]) in the batch sizes
// the consumer formed. The two alternate in every iteration, so the
// machine's load hits them alike, and take turns at running first after
// the publish. When raw is not nil, the records are then published once
// more and raw consumes and acks them with the broker's plain client and
// no inbox, returning the time it took: the broker-and-client side of the
// bound. [Ceiling] reports the rates and their ratios.
func VsStore[M any](b *testing.B, n int, key, data func(M) string, publish func(keys []string, payload []byte),
	newRun func(in *inbox.Inbox, set func(context.Context, *sql.Tx, []M) error, observe func(idem.DeliveryEvent[M])) func(context.Context) error,
	raw func(n int) time.Duration) {
	payload := make([]byte, 100)
	var r Rates
	var prev []int // the batch sizes of the previous iteration's consumer
	for iter := 0; b.Loop(); iter++ {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = TimeOrderedID(i)
		}
		publish(keys, payload)
		// Whichever side runs first after the publish pays for the
		// broker's and the heap's leftovers of it: the two sides take
		// turns, each from a collected heap. The store side runs the
		// batch sizes the consumer formed (the previous iteration's when
		// it goes first).
		storeFirst := iter%2 == 1 && prev != nil
		if storeFirst {
			runtime.GC()
			r.Store += StoreOnly(b, keys, string(payload), prev)
		}
		e := NewEffects(b)
		var sizes Sizes
		runtime.GC()
		cpu0 := processCPU()
		r.Consumer += untilSettled(n, func(observe func(idem.DeliveryEvent[M])) func(context.Context) error {
			return newRun(e.In, Record(&sizes, SetInsert(key, data)), observe)
		})
		r.ConsumerCPU += processCPU() - cpu0
		prev = sizes.All()
		if !storeFirst {
			runtime.GC()
			r.Store += StoreOnly(b, keys, string(payload), prev)
		}
		r.Batches += len(prev)
		if raw != nil {
			publish(keys, payload)
			runtime.GC()
			cpu0 := processCPU()
			r.Raw += raw(n)
			r.RawCPU += processCPU() - cpu0
		}
	}
	r.Records = n * b.N
	r.Report(b)
}

// untilSettled runs the consumer that newRun builds until its observer
// has seen n settled messages, and returns the time that took.
func untilSettled[M any](n int, newRun func(observe func(idem.DeliveryEvent[M])) func(context.Context) error) time.Duration {
	var settled atomic.Int64
	done := make(chan struct{})
	run := newRun(func(idem.DeliveryEvent[M]) {
		if settled.Add(1) == int64(n) {
			close(done)
		}
	})
	t0 := time.Now()
	r := Start(run)
	<-done
	d := time.Since(t0)
	r.Cancel()
	<-r.Done
	return d
}

// Variant is one consumer configuration of the adapters' BenchmarkConsume.
type Variant struct {
	Name   string
	Size   int              // the batch size
	Effect bool             // the handler writes an effects row (else the key only)
	Set    bool             // a set handler (SetInsert) and no per-message handler
	Key    func(int) string // message ids; nil: "order-<i>"
}

// Variants are the configurations every adapter's BenchmarkConsume runs:
// one commit per message, batches with and without an effect, and the key
// shapes (random, UUIDv4-like; time-ordered, UUIDv7-like) with a
// per-message and a set handler.
func Variants(batch int) []Variant {
	return []Variant{
		{Name: "inbox-batch-1-effect", Size: 1, Effect: true},
		{Name: fmt.Sprintf("inbox-batch-%d-effect", batch), Size: batch, Effect: true},
		{Name: fmt.Sprintf("inbox-batch-%d-noop", batch), Size: batch},
		{Name: fmt.Sprintf("inbox-batch-%d-effect-random-keys", batch), Size: batch, Effect: true, Key: RandomID},
		{Name: fmt.Sprintf("inbox-batch-%d-effect-ordered-keys", batch), Size: batch, Effect: true, Key: TimeOrderedID},
		{Name: fmt.Sprintf("set-batch-%d-effect-random-keys", batch), Size: batch, Effect: true, Set: true, Key: RandomID},
		{Name: fmt.Sprintf("set-batch-%d-effect-ordered-keys", batch), Size: batch, Effect: true, Set: true, Key: TimeOrderedID},
	}
}

// Rate measures the consumer that newRun builds over b.N messages already
// published, reporting msgs/s.
func Rate[M any](b *testing.B, newRun func(observe func(idem.DeliveryEvent[M])) func(context.Context) error) {
	b.ResetTimer()
	d := untilSettled(b.N, newRun)
	b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
}

// RandomID returns a random (version 4) UUID as canonical text.
func RandomID(int) string { return uuid.NewString() }

// TimeOrderedID returns a version 7 UUID (RFC 9562: Unix milliseconds
// first) as canonical text: ids made later sort later.
func TimeOrderedID(int) string { return uuid.Must(uuid.NewV7()).String() }

// Ceiling reports a consumer's rate beside its store's alone (n records
// each way, in total), and their ratio, as benchmark metrics and as one
// line on the benchmark's log.
func Ceiling(b *testing.B, n int, consumer, store time.Duration, batches int) {
	Rates{Records: n, Consumer: consumer, Store: store, Batches: batches}.Report(b)
}

// Rates are the times one speed check measured, each over Records records.
type Rates struct {
	Records  int
	Consumer time.Duration // consume → inbox → ack
	Store    time.Duration // the same records straight into an inbox
	Batches  int           // the groups the consumer formed
	Raw      time.Duration // the broker's plain client, consume and ack (0: not measured)
	RawCPU   time.Duration // this process's CPU time during Raw

	ConsumerCPU time.Duration // this process's CPU time during Consumer (0: not measured)
}

// Report puts r on b as metrics and one log line. With a raw time, it adds
// the bound of an adapter that would cost nothing beyond the broker's own
// client, the lower of two rates: the CPU bound, where a record costs its
// store time plus the client's CPU time a record measured on the raw side
// (the most any pipelining reaches when the consumer runs on one core with
// the broker pinned to another: the benchmark under taskset -c 0 with
// [testenv.ServerCPUsEnv] set, so that the store side uses that core in
// full), and the broker's own rate, consume and ack with nothing else.
// Without [testenv.ServerCPUsEnv] the broker's CPU is counted nowhere, and
// no bound is reported.
func (r Rates) Report(b *testing.B) {
	n := float64(r.Records)
	rc, rs := n/r.Consumer.Seconds(), n/r.Store.Seconds()
	b.ReportMetric(rc, "consumer-records/s")
	b.ReportMetric(rs, "store-only-records/s")
	b.ReportMetric(rc/rs, "consumer/store")
	b.ReportMetric(n/float64(max(r.Batches, 1)), "records/batch")
	if r.ConsumerCPU > 0 {
		b.ReportMetric(r.ConsumerCPU.Seconds()*1e6/n, "consumer-cpu-µs/record")
	}
	if r.Raw <= 0 {
		b.Logf("consumer %.0f records/s, store only %.0f records/s: %.2fx", rc, rs, rc/rs)
		return
	}
	rr := n / r.Raw.Seconds()
	clientCPU := r.RawCPU.Seconds() / n // seconds a record
	b.ReportMetric(rr, "broker-only-records/s")
	b.ReportMetric(clientCPU*1e6, "client-cpu-µs/record")
	if os.Getenv(testenv.ServerCPUsEnv) == "" {
		// The broker shares this process's cores (or is in it): its CPU
		// is in neither side's count, and no bound follows.
		b.Logf("consumer %.0f records/s (%.1f µs CPU a record), store only %.0f records/s: %.2fx; "+
			"the broker with its plain client %.0f records/s (%.2fx the store)", rc, r.ConsumerCPU.Seconds()*1e6/n, rs, rc/rs, rr, rr/rs)
		return
	}
	cpu := 1 / (1/rs + clientCPU)
	bound := min(cpu, rr)
	b.ReportMetric(cpu/rs, "cpu-bound/store")
	b.ReportMetric(bound/rs, "bound/store")
	b.ReportMetric(rc/bound, "consumer/bound")
	b.Logf("consumer %.0f records/s (%.1f µs CPU a record), store only %.0f records/s: %.2fx; "+
		"the broker with its plain client %.0f records/s (%.1f µs client CPU a record); CPU bound %.0f records/s, "+
		"so an adapter costing nothing reaches %.2fx the store: the consumer is at %.2fx of that",
		rc, r.ConsumerCPU.Seconds()*1e6/n, rs, rc/rs, rr, clientCPU*1e6, cpu, bound/rs, rc/bound)
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
