package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemotel"
)

// otlpFlags are idem serve's tracing flags.
type otlpFlags struct {
	endpoint string
	insecure bool
}

func addTracingFlags(fl *pflag.FlagSet, f *otlpFlags) {
	fl.StringVar(&f.endpoint, "otlp-endpoint", "", "export OpenTelemetry spans (one per keyed request, one per key-store call) over OTLP/HTTP to this host:port, or to a URL (http://host:port/v1/traces) (empty: no tracing)")
	fl.BoolVar(&f.insecure, "otlp-insecure", false, "speak plain HTTP, not HTTPS, to a host:port --otlp-endpoint")
}

// startTracing returns the tracer of --otlp-endpoint (nil without it) and
// the function that flushes and stops its exporter, within 5 s. Spans
// are batched in memory and sent in the background: a collector that is
// down loses spans, never requests.
func startTracing(f otlpFlags, log *slog.Logger) (idem.Tracer, func(), error) {
	if f.endpoint == "" {
		return nil, func() {}, nil
	}
	var opts []otlptracehttp.Option
	if strings.Contains(f.endpoint, "://") {
		opts = append(opts, otlptracehttp.WithEndpointURL(f.endpoint))
	} else {
		if _, _, err := net.SplitHostPort(f.endpoint); err != nil {
			return nil, nil, fmt.Errorf("--otlp-endpoint %q: want host:port or a URL: %w", f.endpoint, err)
		}
		opts = append(opts, otlptracehttp.WithEndpoint(f.endpoint))
		if f.insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp), // every 5 s, or 512 spans (OTEL_BSP_* override)
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "idem-serve"))),
	)
	t, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp), idemotel.WithPropagator(propagation.TraceContext{}))
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("tracing: flushing spans to --otlp-endpoint failed; some are lost", "err", err)
		}
	}
	return t, stop, nil
}

// traceOptions is the idemhttp option that traces a route's requests
// (handlerFor names the route with idemhttp.WithRoute, which the request
// spans carry as idem.route); none without a tracer.
func (g *gateway) traceOptions() []idemhttp.Option {
	if g.tracer == nil {
		return nil
	}
	return []idemhttp.Option{idemhttp.WithTracer(g.tracer)}
}
