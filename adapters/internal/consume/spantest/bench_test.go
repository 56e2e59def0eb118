package spantest_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/internal/tracing"
)

type msg struct{ id string }

// BenchmarkTracedProcess is what WithTracer costs a consume loop: the same
// 500-message batches through the delivery core and a SQLite inbox (a set
// handler, one multi-row INSERT), untraced and traced (the core's and the
// inbox's spans, every one recorded by the OpenTelemetry SDK and
// dropped), the two sides alternating which runs first, each from a
// collected heap. It reports traced/untraced, the time a batch takes with
// tracing over the time without.
//
//	cd adapters/internal/consume/spantest && go test -run '^$' -bench TracedProcess -benchtime 40x .
func BenchmarkTracedProcess(b *testing.B) {
	const batch = 500
	tp := sdktrace.NewTracerProvider() // records every span, exports none
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	t, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	plain, traced := newSide(b, nil), newSide(b, t)
	var untracedD, tracedD time.Duration
	for i := 0; b.Loop(); i++ {
		sides := []*side{plain, traced}
		if i%2 == 1 {
			sides = []*side{traced, plain}
		}
		for _, s := range sides {
			ds := make([]consume.Delivery[msg], batch)
			for j := range ds {
				ds[j] = consume.Delivery[msg]{Msg: msg{id: consumetest.TimeOrderedID(i*batch + j)}, Attempt: 1}
			}
			runtime.GC()
			start := time.Now()
			decs, err := s.core.Process(context.Background(), ds)
			if err != nil {
				b.Fatal(err)
			}
			for j := range ds {
				s.cfg.Report(&ds[j], decs[j])
			}
			if s == plain {
				untracedD += time.Since(start)
			} else {
				tracedD += time.Since(start)
			}
		}
	}
	b.ReportMetric(tracedD.Seconds()/untracedD.Seconds(), "traced/untraced")
	b.ReportMetric(float64(b.N*batch)/tracedD.Seconds(), "traced-msgs/s")
	b.ReportMetric(float64(b.N*batch)/untracedD.Seconds(), "untraced-msgs/s")
}

type side struct {
	cfg  consume.Config[msg]
	core *consume.Inbox[msg]
}

// newSide is a core over a fresh SQLite inbox, both traced through t when
// it is not nil.
func newSide(b *testing.B, t idem.Tracer) *side {
	e := consumetest.NewEffects(b)
	in := e.In
	s := &side{cfg: consume.Defaults("bench", func(m msg) (string, error) { return m.id, nil })}
	s.cfg.Set = consumetest.SetInsert(func(m msg) string { return m.id }, func(msg) string { return "" })
	if t != nil {
		in = e.Traced(b, t)
		s.cfg.Tracer, s.cfg.System = t, "bench"
		h := tracing.Headers{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		s.cfg.Headers = func(msg) idem.Carrier { return h } // every message links to one producer span
	}
	var err error
	if s.core, err = consume.NewInbox(in, nil, &s.cfg); err != nil {
		b.Fatal(err)
	}
	return s
}
