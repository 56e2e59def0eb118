package idemotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/internal/tracing"
)

// BenchmarkSpan is what a traced operation adds: Start, the key's hash, an
// attribute and End, through no tracer at all, through NewTracer on
// OpenTelemetry's no-op provider (every span non-recording), and through
// the SDK recording every span into memory.
func BenchmarkSpan(b *testing.B) {
	noopTracer, err := idemotel.NewTracer(idemotel.WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		t    func(b *testing.B) idem.Tracer
	}{
		{"nil", func(*testing.B) idem.Tracer { return nil }},
		{"noop", func(*testing.B) idem.Tracer { return noopTracer }},
		{"sdk", func(b *testing.B) idem.Tracer { return newRecorder(b).t }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			t := bc.t(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, s := tracing.Start(ctx, t, idem.OpInboxProcess)
				s.Key("order-42")
				s.Attr(idem.AttrConsumer, "orders")
				s.End("applied", nil)
			}
		})
	}
}
