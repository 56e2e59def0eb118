package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/internal/tracing"
	"github.com/idem-go/idem/keystore"
)

// WithTracer traces every keyed request through t (package
// github.com/idem-go/idem/idemotel implements it with OpenTelemetry): one
// span (idem.OpHTTPRequest) per request whose method takes keys and that
// carries an Idempotency-Key (or must: [WithRequired]), a child of the span
// in the request's context, if any. The request's own trace context
// (traceparent) is added as a link. A Proxy whose tracer is an
// idem.Injector (idemotel's is) sends the upstream the span's own trace
// context instead of the client's. Key store calls made for the request
// run under the span's context: wrap the store with idemotel.WrapStore and
// they nest under it; so does the handler's, or the proxy's upstream
// call's, work.
//
// The span records the hash of the client's Idempotency-Key
// (idem.key_hash; never the key), the route (idem.route: [WithRoute]'s
// name, or the http.ServeMux pattern that routed the request before it
// reached the middleware), and the [Outcome] (idem.outcome: executed, replayed,
// in_progress, mismatch, lease_lost, store_error, …). A span whose
// outcome is store_error or lease_lost is marked failed.
func WithTracer(t idem.Tracer) Option {
	return option.Check("idemhttp", t != nil, func(c *config) { c.tracer = t }, "nil tracer")
}

// errStoreFailed marks the span of a request answered 503 because the key
// store failed; the key store's own span holds the store's error.
var errStoreFailed = errors.New("idemhttp: the key store failed")

// startSpan begins r's span, or returns tracing.Nop and r unchanged when
// the middleware has no tracer or r is not a keyed request.
func (m *Middleware) startSpan(r *http.Request) (*http.Request, idem.Span) {
	if m.cfg.tracer == nil || !m.cfg.methods[r.Method] || (!m.cfg.required && len(r.Header.Values(HeaderKey)) == 0) {
		return r, tracing.Nop
	}
	ctx, sp := m.cfg.tracer.Start(r.Context(), idem.OpHTTPRequest)
	if route := m.namedRoute(r); route != "" {
		sp.Attr(idem.AttrRoute, route)
	}
	sp.Link(headers(r.Header))
	return r.WithContext(ctx), sp
}

// serveTraced is serve inside r's span. A handler's panic ends the span
// with the outcome "panic" on its way up.
func (m *Middleware) serveTraced(w http.ResponseWriter, r *http.Request, next http.Handler) Outcome {
	r, sp := m.startSpan(r)
	if sp == tracing.Nop {
		return m.serve(w, r, next, sp)
	}
	defer func() {
		if p := recover(); p != nil {
			sp.End("panic", fmt.Errorf("idemhttp: handler panicked: %v", p))
			panic(p)
		}
	}()
	o := m.serve(w, r, next, sp)
	var err error
	switch o {
	case OutcomeStoreError:
		err = errStoreFailed
	case OutcomeLeaseLost:
		err = keystore.ErrLeaseLost
	}
	sp.End(string(o), err)
	return o
}

// injectTrace writes the trace context of ctx, the keyed request's span,
// into the upstream request's headers when the tracer can (an
// idem.Injector), replacing the client's traceparent: the upstream's spans
// become children of the request's span, which links the client's.
func (m *Middleware) injectTrace(ctx context.Context, h http.Header) {
	if inj, ok := m.cfg.tracer.(idem.Injector); ok {
		inj.Inject(ctx, h.Set)
	}
}

// headers reads request headers as an idem.Carrier.
type headers http.Header

func (h headers) Get(name string) string { return http.Header(h).Get(name) }

func (h headers) Keys() []string {
	ks := make([]string, 0, len(h))
	for k := range h {
		ks = append(ks, k)
	}
	return ks
}
