// Package spantest checks, through OpenTelemetry's in-memory exporter, the
// spans that a broker adapter's consume loop emits with idemotel: the
// tests of every adapter ask it the same questions (is each message span
// linked to its producer, does the inbox transaction nest under the batch,
// does a redelivered copy end as a duplicate and a failing handler as
// retried with an error, does any span hold a raw key). It is a module of
// its own so that only tests pull the OpenTelemetry SDK.
package spantest

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/idemotel"
)

// Recorder is an idemotel Tracer over an SDK provider that exports every
// ended span to memory, with the W3C trace context propagator.
type Recorder struct {
	// Tracer is what the adapter and the inbox are given (WithTracer).
	Tracer idem.Tracer
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
}

// New returns a Recorder whose provider shuts down when tb ends.
func New(tb testing.TB) *Recorder {
	tb.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	t, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp), idemotel.WithPropagator(propagation.TraceContext{}))
	if err != nil {
		tb.Fatal(err)
	}
	return &Recorder{Tracer: t, exp: exp, tp: tp}
}

// Producer starts and ends a producer span named name and returns its
// context with the traceparent header value that carries it: what a
// producer instrumented with OpenTelemetry writes into a record's headers.
func (r *Recorder) Producer(name string) (trace.SpanContext, string) {
	_, s := r.tp.Tracer("producer").Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindProducer))
	s.End()
	h := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), s), h)
	return s.SpanContext(), h.Get("traceparent")
}

// Spans returns the spans ended so far.
func (r *Recorder) Spans() tracetest.SpanStubs { return r.exp.GetSpans() }

// Want is what Check asserts about one test's spans.
type Want struct {
	// Producer is the span every message span of Applied and Failing
	// links to.
	Producer trace.SpanContext
	// Applied is a key delivered twice: one message span ends "applied",
	// the redelivered copy's "duplicate".
	Applied string
	// Failing is a key whose handler failed once: one message span ends
	// "retried" with an error status, a later one "applied". Empty: not
	// checked.
	Failing string
	// Under is the prefix of the spans the message's own work makes
	// ("idem.inbox." or "idem.keystore."): one must descend from the
	// applied message's batch span or, with UnderMessage, from the message
	// span itself.
	Under string
	// UnderMessage: the work runs per message under its span (key store
	// calls, a middleware's inbox call), not per batch.
	UnderMessage bool
	// Unbatched: the adapter has no batch spans (a Watermill middleware
	// sees one message at a time).
	Unbatched bool
	// System is the messaging.system every message span carries.
	System string
}

// Check fails tb unless the spans ended so far show w, and no span holds
// the raw text of w's keys.
func (r *Recorder) Check(tb testing.TB, w Want) {
	tb.Helper()
	spans := r.Spans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	outcomes := r.consumed(spans, w.Applied)
	applied, ok := outcomes["applied"]
	if !ok || len(outcomes["duplicate"]) == 0 {
		tb.Fatalf("%s: message spans ended %v; want one applied and its redelivered copy duplicate", w.Applied, names(outcomes))
	}
	for o, ss := range outcomes {
		for _, s := range ss {
			wantLinked(tb, s, w.Producer)
			if v, _ := attr(s, idem.AttrSystem); v.AsString() != w.System {
				tb.Errorf("%s span (%s): %s = %q, want %q", w.Applied, o, idem.AttrSystem, v.AsString(), w.System)
			}
		}
	}
	root := applied[0]
	if !w.Unbatched {
		b, ok := byID[root.Parent.SpanID()]
		if !ok || b.Name != idem.OpConsumeBatch {
			tb.Fatalf("the applied message span's parent is %q, want %s", b.Name, idem.OpConsumeBatch)
		}
		if v, _ := attr(b, idem.AttrBatchSize); v.AsInt64() < 1 {
			tb.Errorf("batch span: %s = %v", idem.AttrBatchSize, v.AsInt64())
		}
		if !w.UnderMessage {
			root = b
		}
	}
	if !descendant(spans, byID, w.Under, root) {
		tb.Errorf("no %s* span descends from the %s span", w.Under, root.Name)
	}
	if w.Failing != "" {
		f := r.consumed(spans, w.Failing)
		if len(f["retried"]) == 0 || len(f["applied"]) != 1 {
			tb.Fatalf("%s: message spans ended %v; want retried, then applied", w.Failing, names(f))
		}
		for _, s := range f["retried"] {
			if s.Status.Code != codes.Error {
				tb.Errorf("%s: a retried span has status %v, want Error", w.Failing, s.Status)
			}
			wantLinked(tb, s, w.Producer)
		}
	}
	for _, k := range []string{w.Applied, w.Failing} {
		if k != "" {
			noText(tb, spans, k)
		}
	}
}

// CheckKeyless fails tb unless the spans ended so far show a consumer that
// keys nothing (Kafka's OffsetConsumer and TransactConsumer) at work:
// every message span links to producer, is a child of a batch span, carries
// system and no key hash, and ends applied or, at least once, retried with
// an error status (or unsettled, when a failed batch runs again record by
// record under new spans).
func (r *Recorder) CheckKeyless(tb testing.TB, producer trace.SpanContext, system string) {
	tb.Helper()
	spans := r.Spans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	n := map[string]int{}
	for _, s := range spans {
		if s.Name != idem.OpConsume {
			continue
		}
		o, _ := attr(s, idem.AttrOutcome)
		n[o.AsString()]++
		wantLinked(tb, s, producer)
		if b := byID[s.Parent.SpanID()]; b.Name != idem.OpConsumeBatch {
			tb.Errorf("a message span's parent is %q, want %s", b.Name, idem.OpConsumeBatch)
		}
		if v, _ := attr(s, idem.AttrSystem); v.AsString() != system {
			tb.Errorf("message span: %s = %q, want %q", idem.AttrSystem, v.AsString(), system)
		}
		if h, ok := attr(s, idem.AttrKeyHash); ok {
			tb.Errorf("message span of a consumer that keys nothing has %s = %s", idem.AttrKeyHash, h.AsString())
		}
		if o.AsString() == "retried" && s.Status.Code != codes.Error {
			tb.Errorf("a retried span has status %v, want Error", s.Status)
		}
	}
	other := 0
	for o, k := range n {
		if o != "applied" && o != "retried" && o != consume.OutcomeUnsettled {
			other += k
		}
	}
	if n["applied"] == 0 || n["retried"] == 0 || other != 0 {
		tb.Errorf("message spans ended %v; want applied and retried (and unsettled: a batch run again record by record)", n)
	}
}

// WantLinked fails tb unless key has a message span ended with outcome,
// and each of key's message spans links to producer.
func (r *Recorder) WantLinked(tb testing.TB, key, outcome string, producer trace.SpanContext) {
	tb.Helper()
	byOutcome := r.consumed(r.Spans(), key)
	if len(byOutcome[outcome]) == 0 {
		tb.Fatalf("%s: message spans ended %v, want %s", key, names(byOutcome), outcome)
	}
	for _, ss := range byOutcome {
		for _, s := range ss {
			wantLinked(tb, s, producer)
		}
	}
}

// Consumed returns the message spans of key ended so far.
func (r *Recorder) Consumed(key string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, ss := range r.consumed(r.Spans(), key) {
		out = append(out, ss...)
	}
	return out
}

// consumed returns the message spans of key by outcome.
func (r *Recorder) consumed(spans tracetest.SpanStubs, key string) map[string][]tracetest.SpanStub {
	hash := idemotel.KeyHash(key)
	out := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		if h, _ := attr(s, idem.AttrKeyHash); s.Name == idem.OpConsume && h.AsString() == hash {
			o, _ := attr(s, idem.AttrOutcome)
			out[o.AsString()] = append(out[o.AsString()], s)
		}
	}
	return out
}

func names(m map[string][]tracetest.SpanStub) map[string]int {
	n := map[string]int{}
	for o, ss := range m {
		n[o] = len(ss)
	}
	return n
}

func wantLinked(tb testing.TB, s tracetest.SpanStub, producer trace.SpanContext) {
	tb.Helper()
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == producer.TraceID() && l.SpanContext.SpanID() == producer.SpanID() {
			return
		}
	}
	tb.Errorf("%s span %s: links %v, want one to the producer's span %s", s.Name, s.SpanContext.SpanID(), s.Links, producer.SpanID())
}

// descendant reports whether a span named with prefix has root among its
// ancestors.
func descendant(spans tracetest.SpanStubs, byID map[trace.SpanID]tracetest.SpanStub, prefix string, root tracetest.SpanStub) bool {
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, prefix) {
			continue
		}
		for p, ok := byID[s.Parent.SpanID()]; ok; p, ok = byID[p.Parent.SpanID()] {
			if p.SpanContext.SpanID() == root.SpanContext.SpanID() {
				return true
			}
		}
	}
	return false
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// noText fails if text occurs in a name, attribute, event attribute,
// status description or link attribute of any span.
func noText(tb testing.TB, spans tracetest.SpanStubs, text string) {
	tb.Helper()
	in := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			if strings.Contains(kv.Value.String(), text) {
				tb.Errorf("%s: attribute %s = %q holds the key %q", where, kv.Key, kv.Value.String(), text)
			}
		}
	}
	for _, s := range spans {
		in(s.Name, s.Attributes)
		for _, e := range s.Events {
			in(s.Name+" event "+e.Name, e.Attributes)
		}
		for _, l := range s.Links {
			in(s.Name+" link", l.Attributes)
		}
		if strings.Contains(s.Status.Description, text) || strings.Contains(s.Name, text) {
			tb.Errorf("%s: status %q holds the key %q", s.Name, s.Status.Description, text)
		}
	}
}
