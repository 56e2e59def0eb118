package idemotel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/internal/tracing"
)

// ScopeName is the instrumentation scope of idem's spans: the name of the
// trace.Tracer that [NewTracer] asks the provider for.
const ScopeName = "github.com/idem-go/idem"

// Option configures [NewTracer]. An option that cannot apply returns an
// error wrapping idem.ErrInvalidOption, and NewTracer returns it.
type Option func(*config) error

type config struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets the provider spans are started with (default:
// otel.GetTracerProvider() at the time of NewTracer).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option.Check("idemotel", tp != nil, func(c *config) { c.tp = tp }, "nil tracer provider")
}

// WithPropagator sets how [idem.Span.Link] reads a trace context from a
// broker record's or a request's headers (default:
// otel.GetTextMapPropagator() at the time of NewTracer; set a W3C
// propagation.TraceContext if the program never sets a global one, whose
// default propagates nothing).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return option.Check("idemotel", p != nil, func(c *config) { c.prop = p }, "nil propagator")
}

// NewTracer returns an [idem.Tracer] that starts OpenTelemetry spans. Span
// kinds: consumer for idem.OpConsume and idem.OpConsumeBatch, server for
// idem.OpHTTPRequest and idem.OpGRPCCall, client for the key store calls
// (a call to another server), internal for the inbox's transactions (the
// database driver's own instrumentation, if any, adds the client spans
// under them).
func NewTracer(opts ...Option) (idem.Tracer, error) {
	cfg := config{}
	if err := option.Apply("idemotel", &cfg, opts); err != nil {
		return nil, err
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.prop == nil {
		cfg.prop = otel.GetTextMapPropagator()
	}
	return &tracer{t: cfg.tp.Tracer(ScopeName), prop: cfg.prop}, nil
}

type tracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// The span start options of each kind, built once.
var (
	kindConsumer = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	kindServer   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	kindClient   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	kindInternal = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
)

func kindOf(op string) []trace.SpanStartOption {
	switch {
	case op == idem.OpConsume || op == idem.OpConsumeBatch:
		return kindConsumer
	case op == idem.OpHTTPRequest || op == idem.OpGRPCCall:
		return kindServer
	case strings.HasPrefix(op, "idem.keystore."):
		return kindClient
	}
	return kindInternal
}

// Start implements [idem.Tracer].
func (t *tracer) Start(ctx context.Context, op string) (context.Context, idem.Span) {
	ctx, s := t.t.Start(ctx, op, kindOf(op)...)
	if !s.IsRecording() {
		// Sampled out, or a no-op provider: the span only carries its
		// context (already in ctx), and ending it does nothing, so no
		// attribute is worth computing and nothing is allocated.
		return ctx, tracing.Nop
	}
	return ctx, &span{s: s, t: t}
}

// Inject implements [idem.Injector] with the tracer's propagator.
func (t *tracer) Inject(ctx context.Context, set func(name, value string)) {
	t.prop.Inject(ctx, setter(set))
}

// setter writes through a function as a propagation.TextMapCarrier.
type setter func(name, value string)

func (s setter) Get(string) string      { return "" }
func (s setter) Set(name, value string) { s(name, value) }
func (s setter) Keys() []string         { return nil }

// span is one recording OpenTelemetry span behind idem.Span.
type span struct {
	s    trace.Span
	t    *tracer
	key  string // to scrub from error messages; never recorded
	hash string
}

// KeyHash returns what idem records in place of key: the hex of the first
// 8 bytes of its SHA-256, as `printf %s KEY | sha256sum | cut -c1-16`
// prints it.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

func (s *span) Key(key string) {
	if key == "" {
		return
	}
	s.key, s.hash = key, KeyHash(key)
	s.s.SetAttributes(attribute.String(idem.AttrKeyHash, s.hash))
}

func (s *span) Attr(name string, value any) {
	var kv attribute.KeyValue
	switch v := value.(type) {
	case string:
		kv = attribute.String(name, s.scrub(v))
	case bool:
		kv = attribute.Bool(name, v)
	case int:
		kv = attribute.Int(name, v)
	case int64:
		kv = attribute.Int64(name, v)
	default:
		kv = attribute.String(name, s.scrub(fmt.Sprint(v)))
	}
	s.s.SetAttributes(kv)
}

func (s *span) Link(c idem.Carrier) {
	if c == nil {
		return
	}
	sc := trace.SpanContextFromContext(s.t.prop.Extract(context.Background(), carrier{c}))
	if sc.IsValid() {
		s.s.AddLink(trace.Link{SpanContext: sc})
	}
}

func (s *span) End(outcome string, err error) {
	s.s.SetAttributes(attribute.String(idem.AttrOutcome, outcome))
	if err != nil {
		// As trace.Span.RecordError records it, with the key's text
		// replaced by its hash: error messages name keys.
		msg := s.scrub(err.Error())
		s.s.AddEvent("exception", trace.WithAttributes(
			attribute.String("exception.type", fmt.Sprintf("%T", err)),
			attribute.String("exception.message", msg),
		))
		s.s.SetStatus(codes.Error, msg)
	}
	s.s.End()
}

// scrub replaces the span's key in text with its hash: where it is quoted
// (idem's errors name keys with %q), and anywhere when it is long enough
// (8 bytes) not to be mistaken for a piece of an ordinary word.
func (s *span) scrub(text string) string {
	if s.key == "" {
		return text
	}
	repl := "key#" + s.hash
	if q := strconv.Quote(s.key); strings.Contains(text, q) {
		text = strings.ReplaceAll(text, q, repl)
	}
	if len(s.key) >= 8 && strings.Contains(text, s.key) {
		text = strings.ReplaceAll(text, s.key, repl)
	}
	return text
}

// carrier reads an idem.Carrier as a propagation.TextMapCarrier. Set does
// nothing: idem only extracts.
type carrier struct{ c idem.Carrier }

func (c carrier) Get(key string) string {
	if v := c.c.Get(key); v != "" {
		return v
	}
	// Transports that keep header names as sent (Kafka, AMQP, NATS) may
	// hold "Traceparent" where the propagator asks for "traceparent".
	for _, k := range c.c.Keys() {
		if strings.EqualFold(k, key) {
			return c.c.Get(k)
		}
	}
	return ""
}
func (c carrier) Set(string, string) {}
func (c carrier) Keys() []string     { return c.c.Keys() }
