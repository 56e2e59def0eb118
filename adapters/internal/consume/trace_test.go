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

// checkSpans fails tb unless every span rec started was ended exactly once,
// and no attribute holds any of keys (raw keys never reach a span but
// through Span.Key, which the real tracer hashes).
func checkSpans(tb testing.TB, rec *tracing.Recorder, keys ...string) {
	tb.Helper()
	for _, s := range rec.Spans() {
		if s.Ended != 1 {
			tb.Errorf("span %d (%s) ended %d times, want 1", s.ID, s.Op, s.Ended)
		}
		for name, v := range s.Attrs {
			for _, k := range keys {
				if strings.Contains(fmt.Sprint(v), k) {
					tb.Errorf("span %d attribute %s = %v holds the key %q", s.ID, name, v, k)
				}
			}
		}
	}
}

// under starts and ends a span named "handler" in ctx: its Parent is the
// span the handler ran under.
func under(rec *tracing.Recorder, ctx context.Context) {
	_, s := rec.Start(ctx, "handler")
	s.End("", nil)
}

// newTraced is a fake transport traced by a tracing.Recorder, whose
// messages carry the producer's trace context "producer-<id>".
func newTraced(t *testing.T, h Handler[msg], opts ...Option[msg]) (*fake, *tracing.Recorder) {
	rec := &tracing.Recorder{}
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
			var rec *tracing.Recorder
			h := func(ctx context.Context, tx *sql.Tx, m msg) error {
				under(rec, ctx)
				return insert(ctx, tx, m)
			}
			set := func(ctx context.Context, tx *sql.Tx, ms []msg) error {
				under(rec, ctx)
				return insertAll(ctx, tx, ms)
			}
			opts := []Option[msg]{}
			if hc.name == "set" {
				opts = append(opts, WithSetHandler(set))
			}
			var f *fake
			f, rec = newTraced(t, h, opts...)
			batch := []msg{{id: "key-one"}, {id: "key-one"}, {id: "key-fails", body: "fail"}, {id: "key-poison", body: "poison"}, {id: "-"}}
			decs, err := f.deliver(context.Background(), 1, batch...)
			if err != nil {
				t.Fatal(err)
			}
			if got := outcomes(decs); got != "applied duplicate retried dead-lettered/permanent dead-lettered/missing-key" {
				t.Fatalf("decisions %s", got)
			}
			bs := rec.Named(idem.OpConsumeBatch)
			if len(bs) != 1 {
				t.Fatalf("%d batch spans, want 1", len(bs))
			}
			b := bs[0]
			want := map[string]any{idem.AttrSystem: "fake", idem.AttrBatchSize: 5, idem.AttrApplied: 1, idem.AttrDuplicate: 1, idem.AttrFailed: 3}
			for k, v := range want {
				if b.Attrs[k] != v {
					t.Errorf("batch attribute %s = %v, want %v", k, b.Attrs[k], v)
				}
			}
			if b.Parent != 0 || b.Result != OutcomeProcessed || b.Err != nil {
				t.Errorf("batch span: parent %d, outcome %q, err %v", b.Parent, b.Result, b.Err)
			}
			for _, hs := range rec.Named("handler") {
				if hs.Parent != b.ID {
					t.Errorf("a handler ran under span %d, want the batch span %d", hs.Parent, b.ID)
				}
			}
			ms := rec.Named(idem.OpConsume)
			if len(ms) != len(batch) {
				t.Fatalf("%d message spans, want %d", len(ms), len(batch))
			}
			wantOutcome := []string{"applied", "duplicate", "retried", "dead-lettered", "dead-lettered"}
			wantKey := []string{"key-one", "key-one", "key-fails", "key-poison", ""}
			for i, s := range ms {
				if s.Parent != b.ID {
					t.Errorf("message %d: parent %d, want the batch %d", i, s.Parent, b.ID)
				}
				if s.Result != wantOutcome[i] || (s.Err != nil) != (i >= 2) {
					t.Errorf("message %d: ended %q, %v; want %q", i, s.Result, s.Err, wantOutcome[i])
				}
				if len(s.Links) != 1 || s.Links[0].Get("traceparent") != "producer-"+batch[i].id {
					t.Errorf("message %d: links %v, want its producer", i, s.Links)
				}
				if s.Key != wantKey[i] || s.Attrs[idem.AttrAttempt] != 1 || s.Attrs[idem.AttrSystem] != "fake" {
					t.Errorf("message %d: key %q, attributes %v", i, s.Key, s.Attrs)
				}
			}
			checkSpans(t, rec, "key-one", "key-fails", "key-poison")
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
	b := rec.Named(idem.OpConsumeBatch)[0]
	if b.Result != OutcomeFailed || b.Err == nil || b.Attrs[idem.AttrApplied] != 0 {
		t.Errorf("batch span ended %q, %v, %v", b.Result, b.Err, b.Attrs)
	}
	for _, s := range rec.Named(idem.OpConsume) {
		if s.Result != "retried" || s.Err == nil {
			t.Errorf("message span ended %q, %v", s.Result, s.Err)
		}
	}
	checkSpans(t, rec, "x", "y")
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
	for _, s := range append(rec.Named(idem.OpConsumeBatch), rec.Named(idem.OpConsume)...) {
		if s.Result != OutcomeUnsettled || !errors.Is(s.Err, context.Canceled) {
			t.Errorf("%s ended %q, %v; want unsettled, context.Canceled", s.Op, s.Result, s.Err)
		}
	}
	checkSpans(t, rec)
}

// ProcessOne's run is a message span of its own, child of the caller's,
// and the inbox call nests under it; a span left open is ended before a
// new one starts.
func TestTraceProcessOne(t *testing.T) {
	failing := true
	var rec *tracing.Recorder
	var f *fake
	f, rec = newTraced(t, func(ctx context.Context, tx *sql.Tx, m msg) error {
		under(rec, ctx)
		if failing {
			return errors.New("transient")
		}
		return insert(ctx, tx, m)
	})
	pctx, poll := rec.Start(context.Background(), "poll")
	pollID := rec.Named("poll")[0].ID
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
		ms, hs := rec.Named(idem.OpConsume), rec.Named("handler")
		last := ms[len(ms)-1]
		if hs[len(hs)-1].Parent != last.ID || last.Parent != pollID || last.Attrs[idem.AttrAttempt] != d.Attempt {
			t.Fatalf("attempt %d: handler under %d, span %d (parent %d, %v)", d.Attempt, hs[len(hs)-1].Parent, last.ID, last.Parent, last.Attrs)
		}
		f.cfg.Report(d, dec)
		if dec.Outcome == idem.Applied {
			break
		}
	}
	poll.End("done", nil)
	// The batch's message span (left open, ended by the next run), attempt
	// 2 (retried), attempt 3 (applied).
	got := []string{}
	for _, s := range rec.Named(idem.OpConsume) {
		got = append(got, s.Result)
	}
	if strings.Join(got, " ") != "unsettled retried applied" {
		t.Errorf("message spans ended %v", got)
	}
	checkSpans(t, rec, "one")
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
	for _, b := range rec.Named(idem.OpConsumeBatch) {
		batches[b.ID] = true
	}
	ms := rec.Named(idem.OpConsume)
	for _, s := range ms {
		if !batches[s.Parent] {
			t.Errorf("message span %d has parent %d, not a batch", s.ID, s.Parent)
		}
	}
	if len(batches) != 6 || len(ms) != 12 {
		t.Errorf("%d batch spans, %d message spans; want 6, 12", len(batches), len(ms))
	}
	checkSpans(t, rec, "shared", "c-0", "c-1", "c-2")
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
