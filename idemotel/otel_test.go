package idemotel_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/internal/tracing"
	"github.com/idem-go/idem/keystore"
)

// recorder is an in-memory exporter behind a synchronous provider: every
// span is exported when it ends.
type recorder struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
	t   idem.Tracer
}

func newRecorder(t testing.TB, opts ...idemotel.Option) *recorder {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := idemotel.NewTracer(append([]idemotel.Option{idemotel.WithTracerProvider(tp), idemotel.WithPropagator(propagation.TraceContext{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &recorder{exp: exp, tp: tp, t: tr}
}

func (r *recorder) spans() tracetest.SpanStubs { return r.exp.GetSpans() }

// named returns the ended spans called name, in order.
func (r *recorder) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range r.spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, key string, want any) {
	t.Helper()
	v, ok := attr(s, key)
	if !ok {
		t.Fatalf("span %s: no attribute %s in %v", s.Name, key, s.Attributes)
	}
	if got := v.AsInterface(); got != want {
		t.Fatalf("span %s: %s = %v (%T), want %v (%T)", s.Name, key, got, got, want, want)
	}
}

// noText fails if text occurs in any attribute, event attribute, status
// description or link attribute of any exported span.
func noText(t *testing.T, spans tracetest.SpanStubs, text string) {
	t.Helper()
	check := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			if strings.Contains(kv.Value.String(), text) {
				t.Errorf("%s: attribute %s = %q holds the key", where, kv.Key, kv.Value.String())
			}
		}
	}
	for _, s := range spans {
		check(s.Name, s.Attributes)
		for _, e := range s.Events {
			check(s.Name+" event "+e.Name, e.Attributes)
		}
		for _, l := range s.Links {
			check(s.Name+" link", l.Attributes)
		}
		if strings.Contains(s.Status.Description, text) || strings.Contains(s.Name, text) {
			t.Errorf("%s: status %q holds the key", s.Name, s.Status.Description)
		}
	}
}

func TestKeyHash(t *testing.T) {
	// printf %s order-42 | sha256sum | cut -c1-16
	if got, want := idemotel.KeyHash("order-42"), "3bf8b157c4238eef"; got != want {
		t.Fatalf("KeyHash = %s, want %s", got, want)
	}
}

func TestOptions(t *testing.T) {
	for name, o := range map[string]idemotel.Option{
		"nil provider":   idemotel.WithTracerProvider(nil),
		"nil propagator": idemotel.WithPropagator(nil),
	} {
		if _, err := idemotel.NewTracer(o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if tr, err := idemotel.NewTracer(); err != nil || tr == nil {
		t.Fatalf("defaults: %v, %v", tr, err)
	}
}

// The span's attributes, kind, outcome, error status and nesting.
func TestSpan(t *testing.T) {
	r := newRecorder(t)
	ctx, parent := r.t.Start(context.Background(), idem.OpConsume)
	parent.Attr(idem.AttrSystem, "kafka")
	parent.Attr(idem.AttrAttempt, 3)
	parent.Attr(idem.AttrBatchSize, int64(7))
	parent.Attr(idem.AttrTakeover, true)
	parent.Key("order-42")
	_, child := r.t.Start(ctx, idem.OpInboxProcess)
	child.End("applied", nil)
	parent.End("retried", errors.New("boom"))

	spans := r.spans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	c, p := spans[0], spans[1]
	if c.Name != idem.OpInboxProcess || p.Name != idem.OpConsume {
		t.Fatalf("names %q, %q", c.Name, p.Name)
	}
	if c.Parent.SpanID() != p.SpanContext.SpanID() || c.SpanContext.TraceID() != p.SpanContext.TraceID() {
		t.Fatalf("child's parent %v, want %v", c.Parent.SpanID(), p.SpanContext.SpanID())
	}
	if p.SpanKind != trace.SpanKindConsumer || c.SpanKind != trace.SpanKindInternal {
		t.Fatalf("kinds %v, %v", p.SpanKind, c.SpanKind)
	}
	wantAttr(t, p, idem.AttrSystem, "kafka")
	wantAttr(t, p, idem.AttrAttempt, int64(3))
	wantAttr(t, p, idem.AttrBatchSize, int64(7))
	wantAttr(t, p, idem.AttrTakeover, true)
	wantAttr(t, p, idem.AttrKeyHash, "3bf8b157c4238eef")
	wantAttr(t, p, idem.AttrOutcome, "retried")
	wantAttr(t, c, idem.AttrOutcome, "applied")
	if p.Status.Code != codes.Error || p.Status.Description != "boom" {
		t.Fatalf("parent status %v", p.Status)
	}
	if c.Status.Code != codes.Unset {
		t.Fatalf("child status %v, want unset", c.Status)
	}
	if len(p.Events) != 1 || p.Events[0].Name != "exception" {
		t.Fatalf("parent events %v", p.Events)
	}
	if p.InstrumentationScope.Name != idemotel.ScopeName {
		t.Fatalf("scope %q", p.InstrumentationScope.Name)
	}
}

func TestSpanKinds(t *testing.T) {
	r := newRecorder(t)
	want := map[string]trace.SpanKind{
		idem.OpConsume: trace.SpanKindConsumer, idem.OpConsumeBatch: trace.SpanKindConsumer,
		idem.OpHTTPRequest: trace.SpanKindServer, idem.OpGRPCCall: trace.SpanKindServer, idem.OpKeystoreReserve: trace.SpanKindClient,
		idem.OpKeystoreComplete: trace.SpanKindClient, idem.OpKeystoreRelease: trace.SpanKindClient,
		idem.OpKeystoreExtend: trace.SpanKindClient, idem.OpInboxProcess: trace.SpanKindInternal,
		idem.OpInboxProcessBatch: trace.SpanKindInternal, idem.OpInboxProcessBatchSet: trace.SpanKindInternal,
	}
	for op := range want {
		_, s := r.t.Start(context.Background(), op)
		s.End("x", nil)
	}
	for _, s := range r.spans() {
		if s.SpanKind != want[s.Name] {
			t.Errorf("%s: kind %v, want %v", s.Name, s.SpanKind, want[s.Name])
		}
	}
}

// Link reads a W3C traceparent from a carrier, whatever the case of the
// header's name; a carrier without one, or with a broken one, adds no link.
func TestLink(t *testing.T) {
	r := newRecorder(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, h := range []tracing.Headers{
		{"traceparent": tp},
		{"Traceparent": tp, "tracestate": "congo=t61rcWkgMzE"},
		{},
		{"traceparent": "00-zz-00f067aa0ba902b7-01"},
	} {
		_, s := r.t.Start(context.Background(), idem.OpConsume)
		s.Link(h)
		s.Link(nil)
		s.End("applied", nil)
	}
	spans := r.spans()
	for i, want := range []int{1, 1, 0, 0} {
		if len(spans[i].Links) != want {
			t.Fatalf("span %d: %d links, want %d", i, len(spans[i].Links), want)
		}
	}
	l := spans[0].Links[0].SpanContext
	if l.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || l.SpanID().String() != "00f067aa0ba902b7" || !l.IsRemote() || !l.IsSampled() {
		t.Fatalf("link %v", l)
	}
	if got := spans[1].Links[0].SpanContext.TraceState().Get("congo"); got != "t61rcWkgMzE" {
		t.Fatalf("tracestate congo = %q", got)
	}
	if spans[0].SpanContext.TraceID() == l.TraceID() {
		t.Fatal("the link became the parent")
	}
}

// Error messages name keys (with %q); the recorded message and status hold
// the hash instead, for short keys, keys that %q escapes and long keys
// anywhere in the text.
func TestErrorScrubbed(t *testing.T) {
	r := newRecorder(t)
	keys := []string{"k1", "tab\there \"q\" é", "customer-7f3a9c41-order"}
	for _, k := range keys {
		_, s := r.t.Start(context.Background(), idem.OpInboxProcess)
		s.Key(k)
		s.Attr(idem.AttrConsumer, "consumer for "+k)
		s.End("error", &keystore.InProgressError{Key: k, Expires: time.Now()})
		_, s = r.t.Start(context.Background(), idem.OpInboxProcess)
		s.Key(k)
		s.End("error", errors.New("raw "+k+" in text"))
	}
	spans := r.spans()
	for i, k := range keys {
		noText(t, spans[2*i:2*i+1], strconv.Quote(k))
		if len(k) >= 8 {
			noText(t, spans[2*i:2*i+2], k)
		}
		if want := "key#" + idemotel.KeyHash(k); !strings.Contains(spans[2*i].Status.Description, want) {
			t.Errorf("status %q does not name %s", spans[2*i].Status.Description, want)
		}
	}
}

// A span that is not sampled records nothing and costs little.
func TestNotRecording(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer tp.Shutdown(context.Background())
	tr, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	_, s := tr.Start(context.Background(), idem.OpInboxProcess)
	s.Key("k")
	s.Attr(idem.AttrConsumer, "c")
	s.Link(tracing.Headers{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	s.End("error", errors.New("x"))
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported, want 0", n)
	}
}
