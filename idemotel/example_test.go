package idemotel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// A key store call traced with an in-memory exporter: keystore.Do
// reserves the key, runs the effect and completes it; the second call
// replays the stored result.
func ExampleNewTracer() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	tracer, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp))
	if err != nil {
		fmt.Println(err)
		return
	}
	mem, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Close()
	store := idemotel.WrapStore(mem, tracer)

	ctx, span := tracer.Start(context.Background(), idem.OpConsume)
	for range 2 {
		_, _, err := keystore.Do(ctx, store, "order-42", nil, func(context.Context) ([]byte, error) {
			return []byte("charged"), nil
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	span.End(idem.Applied.String(), nil)

	for _, s := range exp.GetSpans() {
		var outcome, hash string
		for _, kv := range s.Attributes {
			switch string(kv.Key) {
			case idem.AttrOutcome:
				outcome = kv.Value.AsString()
			case idem.AttrKeyHash:
				hash = kv.Value.AsString()
			}
		}
		fmt.Println(s.Name, outcome, hash)
	}
	// Output:
	// idem.keystore.reserve reserved 3bf8b157c4238eef
	// idem.keystore.complete completed 3bf8b157c4238eef
	// idem.keystore.reserve done 3bf8b157c4238eef
	// idem.consume applied
}

// The hash that spans carry in place of a key, as an operator computes it
// for a key they know: printf %s order-42 | sha256sum | cut -c1-16.
func ExampleKeyHash() {
	fmt.Println(idemotel.KeyHash("order-42"))
	// Output: 3bf8b157c4238eef
}

// WrapStore's spans nest under the caller's; their outcomes say what the
// store decided.
func ExampleWrapStore() {
	exp, tracer, shutdown := memTracer()
	defer shutdown()
	mem, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Close()
	store := idemotel.WrapStore(mem, tracer)
	ctx := context.Background()
	c, err := store.Reserve(ctx, "job-1", nil, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := store.Reserve(ctx, "job-1", nil, time.Minute); err != nil { // another caller
		fmt.Println(err)
		return
	}
	if err := store.Release(ctx, c); err != nil {
		fmt.Println(err)
		return
	}
	printSpans(exp)
	// Output:
	// idem.keystore.reserve reserved
	// idem.keystore.reserve in_progress
	// idem.keystore.release released
}
