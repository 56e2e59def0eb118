package idemwatermill_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemwatermill"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/keystore/memstore"
)

// Tracing the middleware with OpenTelemetry: the producer writes its trace
// context into the message's metadata (the W3C propagator), and each
// handled message becomes an idem.consume span linked to the producer's
// span, ended with its outcome; the duplicate shows as one.
func ExampleWithTracer() {
	exp := tracetest.NewInMemoryExporter() // a real program exports over OTLP
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	w3c := propagation.TraceContext{}
	tracer, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp), idemotel.WithPropagator(w3c))
	if err != nil {
		log.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	dedup, err := idemwatermill.NewMiddleware(store, idemwatermill.WithTracer(tracer))
	if err != nil {
		log.Fatal(err)
	}

	logger := watermill.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	defer pubsub.Close()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		log.Fatal(err)
	}
	router.AddConsumerHandler("charge", "orders", pubsub, func(*message.Message) error { return nil }).
		AddMiddleware(dedup.Middleware)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()

	// The producer's side: a span, and its context in the metadata.
	pctx, producer := tp.Tracer("shop").Start(context.Background(), "orders publish")
	id := watermill.NewUUID()
	for range 2 { // the second publish is a duplicate: same UUID
		msg := message.NewMessage(id, []byte("7"))
		w3c.Inject(pctx, propagation.MapCarrier(msg.Metadata))
		if err := pubsub.Publish("orders", msg); err != nil {
			log.Fatal(err)
		}
	}
	producer.End()
	if err := router.Close(); err != nil {
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}

	for _, s := range exp.GetSpans() {
		if s.Name != idem.OpConsume {
			continue
		}
		linked := len(s.Links) == 1 && s.Links[0].SpanContext.SpanID() == producer.SpanContext().SpanID()
		fmt.Printf("%s %s, linked to the producer: %v\n", s.Name, value(s.Attributes, idem.AttrOutcome), linked)
	}
	// Output:
	// idem.consume applied, linked to the producer: true
	// idem.consume duplicate, linked to the producer: true
}

func value(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.AsString()
		}
	}
	return ""
}
