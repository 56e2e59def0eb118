package idemotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/internal/tracing"
	"github.com/idem-go/idem/sqldialect"
)

// discard is an exporter that drops what it is given, so that a benchmark
// pays for recording and batching spans but not for a growing store.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// tracers are the three sides the benchmarks compare: no tracer at all,
// NewTracer on OpenTelemetry's no-op provider (every span non-recording),
// and the SDK recording every span into a batch processor.
func tracers(b *testing.B) []struct {
	name string
	t    idem.Tracer
} {
	noopTracer, err := idemotel.NewTracer(idemotel.WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	sdk, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		t    idem.Tracer
	}{{"nil", nil}, {"noop", noopTracer}, {"sdk", sdk}}
}

// BenchmarkSpan is what a traced operation adds: Start, the key's hash, an
// attribute and End.
func BenchmarkSpan(b *testing.B) {
	for _, bc := range tracers(b) {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, s := tracing.Start(ctx, bc.t, idem.OpInboxProcess)
				s.Key("order-42")
				s.Attr(idem.AttrConsumer, "orders")
				s.End("applied", nil)
			}
		})
	}
}

// BenchmarkInboxProcess is one new key through the inbox on SQLite, with
// each tracer: what tracing costs next to a real transaction.
func BenchmarkInboxProcess(b *testing.B) {
	for _, bc := range tracers(b) {
		b.Run(bc.name, func(b *testing.B) {
			db := testenv.Open(b, "sqlite", testenv.SQLiteDSN(b))
			opts := []inbox.Option{}
			if bc.t != nil {
				opts = append(opts, inbox.WithTracer(bc.t))
			}
			in := inboxtest.Migrated(b, db, sqldialect.SQLite, "bench", opts...)
			ctx := context.Background()
			noop := func(context.Context, *sql.Tx) error { return nil }
			i := 0
			for b.Loop() {
				i++
				if _, err := in.Process(ctx, fmt.Sprint("k-", i), noop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
