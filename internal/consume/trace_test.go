package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/tracing"
)

// recTracer is an idem.Tracer that records every span: its parent (the
// span in the context it was started with), attributes, links, key,
// outcome and how often it was ended.
type recTracer struct {
	mu    sync.Mutex
	spans []*recSpan
}

type recSpan struct {
	t       *recTracer
	id      int
	parent  int
	name    string
	attrs   map[string]any
	links   []string
	key     string
	outcome string
	err     error
	ended   int
}

type spanKey struct{}

// current returns the id of the span in ctx (0: none).
func current(ctx context.Context) int {
	id, _ := ctx.Value(spanKey{}).(int)
	return id
}

func (t *recTracer) Start(ctx context.Context, op string) (context.Context, idem.Span) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &recSpan{t: t, id: len(t.spans) + 1, parent: current(ctx), name: op, attrs: map[string]any{}}
	t.spans = append(t.spans, s)
	return context.WithValue(ctx, spanKey{}, s.id), s
}

func (s *recSpan) Key(k string) { s.t.mu.Lock(); s.key = k; s.t.mu.Unlock() }
func (s *recSpan) Attr(name string, v any) {
	s.t.mu.Lock()
	s.attrs[name] = v
	s.t.mu.Unlock()
}
func (s *recSpan) Link(c idem.Carrier) {
	s.t.mu.Lock()
	s.links = append(s.links, c.Get("traceparent"))
	s.t.mu.Unlock()
}
func (s *recSpan) End(outcome string, err error) {
	s.t.mu.Lock()
	s.ended++
	s.outcome, s.err = outcome, err
	s.t.mu.Unlock()
}

// named returns the spans named op, in start order.
func (t *recTracer) named(op string) []*recSpan {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*recSpan
	for _, s := range t.spans {
		if s.name == op {
			out = append(out, s)
		}
	}
	return out
}

// check fails tb unless every span was ended exactly once, and no
// attribute holds any of keys (raw keys never reach a span but through
// Span.Key, which hashes).
func (t *recTracer) check(tb testing.TB, keys ...string) {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.spans {
		if s.ended != 1 {
			tb.Errorf("span %d (%s) ended %d times, want 1", s.id, s.name, s.ended)
		}
		for name, v := range s.attrs {
			for _, k := range keys {
				if strings.Contains(fmt.Sprint(v), k) {
					tb.Errorf("span %d attribute %s = %v holds the key %q", s.id, name, v, k)
				}
			}
		}
	}
}

// newTraced is a fake transport traced by a recTracer, whose messages carry
// the producer's trace context "producer-<id>".
func newTraced(t *testing.T, h Handler[msg], opts ...Option[msg]) (*fake, *recTracer) {
	rec := &recTracer{}
	f := newFake(t, h, append(opts, WithTracer[msg](rec))...)
	f.cfg.System = "fake"
	f.cfg.Headers = func(m msg) idem.Carrier { return tracing.Headers{"traceparent": "producer-" + m.id} }
	return f, rec
}

// A batch is one span; each message a child of it, linked to its
// producer, ended with its decision once the transport reported it; the
// inbox call (here: the handler) runs under the batch span.
func TestTraceBatch(t *testing.T) {
	for _, hc := range handlers {
		t.Run(hc.name, func(t *testing.T) {
			var mu sync.Mutex
			ran := map[string]int{} // message id -> span id in the handler's ctx
			h := func(ctx context.Context, tx *sql.Tx, m msg) error {
				mu.Lock()
				ran[m.id] = current(ctx)
				mu.Unlock()
				return insert(ctx, tx, m)
			}
			set := func(ctx context.Context, tx *sql.Tx, ms []msg) error {
				for _, m := range ms {
					mu.Lock()
					ran[m.id] = current(ctx)
					mu.Unlock()
				}
				return insertAll(ctx, tx, ms)
			}
			opts := []Option[msg]{}
			if hc.name == "set" {
				opts = append(opts, WithSetHandler(set))
			}
			f, rec := newTraced(t, h, opts...)
			batch := []msg{{id: "key-one"}, {id: "key-one"}, {id: "key-fails", body: "fail"}, {id: "key-poison", body: "poison"}, {id: "-"}}
			decs, err := f.deliver(context.Background(), 1, batch...)
			if err != nil {
				t.Fatal(err)
			}
			if got := outcomes(decs); got != "applied duplicate retried dead-lettered/permanent dead-lettered/missing-key" {
				t.Fatalf("decisions %s", got)
			}
			bs := rec.named(idem.OpConsumeBatch)
			if len(bs) != 1 {
				t.Fatalf("%d batch spans, want 1", len(bs))
			}
			b := bs[0]
			want := map[string]any{idem.AttrSystem: "fake", idem.AttrBatchSize: 5, idem.AttrApplied: 1, idem.AttrDuplicate: 1}
			for k, v := range want {
				if b.attrs[k] != v {
					t.Errorf("batch attribute %s = %v, want %v", k, b.attrs[k], v)
				}
			}
			if b.parent != 0 || b.outcome != OutcomeProcessed || b.err != nil {
				t.Errorf("batch span: parent %d, outcome %q, err %v", b.parent, b.outcome, b.err)
			}
			for id, sp := range ran {
				if sp != b.id {
					t.Errorf("handler of %s ran under span %d, want the batch span %d", id, sp, b.id)
				}
			}
			ms := rec.named(idem.OpConsume)
			if len(ms) != len(batch) {
				t.Fatalf("%d message spans, want %d", len(ms), len(batch))
			}
			wantOutcome := []string{"applied", "duplicate", "retried", "dead-lettered", "dead-lettered"}
			wantKey := []string{"key-one", "key-one", "key-fails", "key-poison", ""}
			for i, s := range ms {
				if s.parent != b.id {
					t.Errorf("message %d: parent %d, want the batch %d", i, s.parent, b.id)
				}
				if s.outcome != wantOutcome[i] || (s.err != nil) != (i >= 2) {
					t.Errorf("message %d: ended %q, %v; want %q", i, s.outcome, s.err, wantOutcome[i])
				}
				if len(s.links) != 1 || s.links[0] != "producer-"+batch[i].id {
					t.Errorf("message %d: links %v, want its producer", i, s.links)
				}
				if s.key != wantKey[i] || s.attrs[idem.AttrAttempt] != 1 || s.attrs[idem.AttrSystem] != "fake" {
					t.Errorf("message %d: key %q, attributes %v", i, s.key, s.attrs)
				}
			}
			rec.check(t, "key-one", "key-fails", "key-poison")
		})
	}
}

// A transaction that fails as a whole fails the batch span; its messages
// end as retried, with the error, once reported.
func TestTraceFailedBatch(t *testing.T) {
	f, rec := newTraced(t, nil, WithSetHandler(func(context.Context, *sql.Tx, []msg) error { return errors.New("set broken") }))
	decs, err := f.deliver(context.Background(), 1, msg{id: "x"}, msg{id: "y"})
	if err == nil || outcomes(decs) != "retried retried" {
		t.Fatalf("Process: %s, %v", outcomes(decs), err)
	}
	b := rec.named(idem.OpConsumeBatch)[0]
	if b.outcome != OutcomeFailed || b.err == nil || b.attrs[idem.AttrApplied] != 0 {
		t.Errorf("batch span ended %q, %v, %v", b.outcome, b.err, b.attrs)
	}
	for _, s := range rec.named(idem.OpConsume) {
		if s.outcome != "retried" || s.err == nil {
			t.Errorf("message span ended %q, %v", s.outcome, s.err)
		}
	}
	rec.check(t, "x", "y")
}

// When ctx ends mid-batch, Process gives no decisions and ends every span
// itself, as unsettled: nothing is left open.
func TestTraceCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, rec := newTraced(t, func(ctx context.Context, tx *sql.Tx, m msg) error {
		cancel()
		return insert(ctx, tx, m)
	})
	if decs, err := f.deliver(ctx, 1, msg{id: "p"}, msg{id: "q"}); decs != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Process: %s, %v", outcomes(decs), err)
	}
	for _, s := range append(rec.named(idem.OpConsumeBatch), rec.named(idem.OpConsume)...) {
		if s.outcome != OutcomeUnsettled || !errors.Is(s.err, context.Canceled) {
			t.Errorf("%s ended %q, %v; want unsettled, context.Canceled", s.name, s.outcome, s.err)
		}
	}
	rec.check(t)
}

// ProcessOne's run is a message span of its own, child of the caller's,
// and the inbox call nests under it; a span left open is ended before a
// new one starts.
func TestTraceProcessOne(t *testing.T) {
	failing := true
	var under int
	f, rec := newTraced(t, func(ctx context.Context, tx *sql.Tx, m msg) error {
		under = current(ctx)
		if failing {
			return errors.New("transient")
		}
		return insert(ctx, tx, m)
	})
	pctx, parent := rec.Start(context.Background(), "poll")
	ds := []Delivery[msg]{{Msg: msg{id: "one"}, Attempt: 1}}
	decs, err := f.core.Process(pctx, ds)
	if err != nil || decs[0].Outcome != idem.Retried {
		t.Fatalf("batch: %s, %v", outcomes(decs), err)
	}
	// The transport runs the message again without reporting the batch's
	// decision: its span is left open.
	d := &ds[0]
	for d.Attempt = 2; ; d.Attempt++ {
		failing = d.Attempt < 3
		dec, err := f.core.ProcessOne(pctx, d)
		if err != nil {
			t.Fatal(err)
		}
		ms := rec.named(idem.OpConsume)
		last := ms[len(ms)-1]
		if under != last.id || last.parent != current(pctx) || last.attrs[idem.AttrAttempt] != d.Attempt {
			t.Fatalf("attempt %d: handler under %d, span %d (parent %d, %v)", d.Attempt, under, last.id, last.parent, last.attrs)
		}
		f.cfg.Report(d, dec)
		if dec.Outcome == idem.Applied {
			break
		}
	}
	parent.End("done", nil)
	// The batch's message span (left open, ended by the next run), attempt
	// 2 (retried), attempt 3 (applied).
	got := []string{}
	for _, s := range rec.named(idem.OpConsume) {
		got = append(got, s.outcome)
	}
	if strings.Join(got, " ") != "unsettled retried applied" {
		t.Errorf("message spans ended %v", got)
	}
	rec.check(t, "one")
}

// Many batches traced at once through one Tracer: every span ends once,
// under its own batch.
func TestTraceConcurrent(t *testing.T) {
	f, rec := newTraced(t, insert)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			if _, err := f.deliver(context.Background(), 1, msg{id: fmt.Sprint("c-", g%3)}, msg{id: "shared"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	batches := map[int]bool{}
	for _, b := range rec.named(idem.OpConsumeBatch) {
		batches[b.id] = true
	}
	for _, s := range rec.named(idem.OpConsume) {
		if !batches[s.parent] {
			t.Errorf("message span %d has parent %d, not a batch", s.id, s.parent)
		}
	}
	if len(batches) != 6 || len(rec.named(idem.OpConsume)) != 12 {
		t.Errorf("%d batch spans, %d message spans; want 6, 12", len(batches), len(rec.named(idem.OpConsume)))
	}
	rec.check(t, "shared", "c-0", "c-1", "c-2")
}

// Without a Tracer the span calls cost no allocation.
func TestTraceNilAllocs(t *testing.T) {
	cfg := Defaults("faketransport", msgKey)
	ctx := context.Background()
	d := Delivery[msg]{Msg: msg{id: "a"}, Attempt: 1, Key: "a"}
	n := testing.AllocsPerRun(100, func() {
		bctx, b := cfg.StartBatch(ctx, 1)
		cfg.Start(bctx, &d)
		b.Count(Decision{Outcome: idem.Applied})
		b.End(bctx, nil)
		cfg.Report(&d, Decision{Outcome: idem.Applied})
		cfg.Unsettled(&d, nil)
	})
	if n != 0 {
		t.Fatalf("%v allocations per message without a tracer, want 0", n)
	}
}
