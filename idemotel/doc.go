// Package idemotel traces idem's operations with OpenTelemetry. It
// implements [idem.Tracer], which the core packages accept
// (inbox.WithTracer, idemhttp.WithTracer, each broker adapter's
// WithTracer), and wraps a [keystore.Store] so that its calls are spans too
// ([WrapStore]). The core packages depend on no tracing library; this
// module, like otelpgx beside pgx, is the one that imports
// go.opentelemetry.io/otel (the API only: the program chooses the SDK and
// the exporter).
//
//	t, err := idemotel.NewTracer() // otel.GetTracerProvider(), otel.GetTextMapPropagator()
//	...
//	store := idemotel.WrapStore(memstore, t)
//	mw, err := idemhttp.New(store, idemhttp.WithTracer(t))
//	in, err := inbox.New(db, sqldialect.Postgres, "orders", inbox.WithTracer(t))
//
// The tracer is also an idem.Injector: idemhttp's Proxy writes the
// request span's trace context into the upstream call's headers through
// the tracer's propagator.
//
// Spans are named by the idem.Op constants (idem.inbox.process,
// idem.keystore.reserve, idem.http.request, …) and carry the idem.Attr
// attributes; every span ends with idem.outcome saying what happened
// (applied, duplicate, reserved, replayed, lease_lost, …). A key is never
// recorded: idem.key_hash is the hex of the first 8 bytes of its SHA-256
// (`printf %s KEY | sha256sum | cut -c1-16`), and the key's text is
// replaced by that hash in recorded error messages. Payloads are never
// recorded.
package idemotel
