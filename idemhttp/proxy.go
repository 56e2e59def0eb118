package idemhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// Proxy is a reverse proxy that applies Idempotency-Key semantics in front of
// any HTTP API: [Middleware] around an httputil.ReverseProxy.
//
// When the upstream gives no response (unreachable, refused, reset or timed
// out before its status line) the proxy answers 502 (504 on the lease
// timeout) and releases the key, so a retry executes; that made-up answer is
// never stored, with or without [WithStore5xx]. If the request had been
// written to the upstream, its outcome is unknown: the upstream receives the
// client's Idempotency-Key, so an upstream that honours it absorbs the
// retry. Once the upstream's status line has arrived (and is not a 5xx) the
// upstream has acted: if its body then breaks off, the key is completed as
// "response-lost" (502 on every retry) and never executed again.
type Proxy struct {
	m       *Middleware
	rp      *httputil.ReverseProxy
	handler http.Handler
}

// NewProxy returns a Proxy to target. The upstream call of a keyed request
// runs under the handler's context of a [Middleware] (see
// [WithHandlerTimeout]), so it is bounded by the lease and the proxy never
// acts on a key it no longer holds: with a store that renews leases
// (keystore.Extender), the lease is renewed while the call runs and the
// call is cancelled if the lease is lost (the key was released or taken
// over, or the store could not renew it in time), and the client is
// answered 503 "lease-lost" with Retry-After: a key released by an operator
// is free, so the retry executes; with a store that cannot, the call times
// out when the lease ends (504). It is not
// cancelled when the client disconnects (unless [WithClientCancel]), so
// that a response that was produced is stored for the client's retry.
func NewProxy(target *url.URL, s keystore.Store, opts ...Option) (*Proxy, error) {
	if target == nil || target.Scheme == "" || target.Host == "" {
		return nil, invalid("upstream URL %v must have a scheme and a host", target)
	}
	m, err := New(s, opts...)
	if err != nil {
		return nil, err
	}
	transport := m.cfg.transport
	if transport == nil {
		transport = upstreamTransport()
	}
	m.proxied = true
	p := &Proxy{m: m}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			if m.cfg.forwarded != nil {
				m.cfg.forwarded(pr.In, pr.Out.Header)
			} else {
				pr.SetXForwarded()
			}
			pr.Out.Host = pr.In.Host
			att := attemptOf(pr.In.Context())
			if att == nil {
				return // not a keyed request running under a claim
			}
			hideFromTransport(pr.Out.Header)
			m.injectTrace(pr.In.Context(), pr.Out.Header)
			// pr.In's context is the handler's (execute): it ends on lease
			// loss, the handler timeout and Abort, not when the client
			// disconnects.
			ctx, done := context.WithCancel(pr.In.Context())
			// Once a connection is in hand, some of the request may have
			// reached the upstream even if writing it then fails (an
			// upstream can act on the headers and reset the connection
			// while the body is still being sent): from then on a failure
			// is "outcome unknown", not "never reached".
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
				GotConn: func(httptrace.GotConnInfo) { att.wrote.Store(true) },
			})
			pr.Out = pr.Out.WithContext(context.WithValue(ctx, cancelKey{}, done))
		},
		Transport: cancelOnClose{transport},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			att := attemptOf(r.Context())
			if att != nil {
				att.madeUp.Store(true)
			}
			if detail, ok := leaseLostDetail(context.Cause(r.Context()), att); ok {
				// Not a 502 "the key was released": the key is no
				// longer this request's to release (settle logs why).
				m.problem(w, http.StatusServiceUnavailable, probLeaseLost, detail, map[string]string{"Retry-After": "1"})
				return
			}
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			detail := "the request did not reach the upstream; the key was released and a retry will execute"
			if att != nil && att.wrote.Load() {
				detail = "the request was sent but the upstream gave no response, so its outcome is unknown; the key was released and a retry will execute, carrying the same Idempotency-Key to the upstream"
			}
			m.cfg.logger.WarnContext(r.Context(), "idemhttp: upstream failed", "err", err)
			m.problem(w, status, probUpstream, detail, nil)
		},
	}
	p.handler = m.Handler(p.rp)
	return p, nil
}

// leaseLostDetail is the detail of the 503 lease-lost answer when cause,
// the cause of the upstream call's context, says the lease was lost while
// the call ran: an operator released the key, another holder took it over,
// or the store could not renew the lease in time. ok is false for any
// other cause, and for the end of a lease that the store cannot renew
// (handlerctx.ErrLeaseEnded, which also wraps DeadlineExceeded): that
// remains the 504 of a lease timeout, whose key is still this request's
// to release.
func leaseLostDetail(cause error, att *attempt) (detail string, ok bool) {
	if !errors.Is(cause, keystore.ErrLeaseLost) || errors.Is(cause, context.DeadlineExceeded) {
		return "", false
	}
	outcome := "the upstream call was cancelled and its outcome is unknown"
	if att != nil && !att.wrote.Load() {
		outcome = "the upstream call was cancelled before the request reached the upstream"
	}
	if errors.Is(cause, keystore.ErrLeaseNotRenewed) {
		return "the idempotency store could not renew this key's lease in time while the request ran; " + outcome + "; retry with the same key", true
	}
	return "an operator released this key (or another holder took it over) while the request ran; " + outcome + "; retry with the same key", true
}

// hideFromTransport keeps net/http's Transport from sending a keyed request
// twice. The Transport deems a request with an Idempotency-Key (or
// X-Idempotency-Key) header and no body safe to replay, and sends it again on
// a new connection when a reused one fails after the request was written and
// before the response's first byte: the upstream may have acted on the first
// copy, and the second would act again. The proxy forwards the key under its
// lower-case name instead, which the Transport does not look for; header
// names are case-insensitive, so the upstream receives the same header. The
// decision to retry stays with the client, whose retry goes through the key
// store. (HTTP/2 upstreams lower-case every name anyway; their Transport
// re-sends only streams the server refused unprocessed.)
func hideFromTransport(h http.Header) {
	for _, name := range [...]string{HeaderKey, "X-Idempotency-Key"} {
		if v, ok := h[name]; ok {
			delete(h, name)
			h[strings.ToLower(name)] = v
		}
	}
}

// upstreamTransport is http.DefaultTransport with room for idle connections
// to the one upstream: the default keeps 2 per host, so under concurrency
// the proxy would open and tear down a connection for most requests.
func upstreamTransport() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 512
	return t
}

// WithUpstreamTransport sets the RoundTripper a [Proxy] reaches its upstream
// with (default: http.DefaultTransport's settings with 512 idle connections
// per host): one that trusts a private CA or presents a client certificate,
// or one shared by several Proxies so that they share its connections. A
// [Middleware] ignores it.
func WithUpstreamTransport(rt http.RoundTripper) Option {
	return option.Check("idemhttp", rt != nil, func(c *config) { c.transport = rt }, "nil upstream transport")
}

// WithForwarded replaces how a [Proxy] sets the forwarding headers of the
// upstream request. The default is httputil.ProxyRequest.SetXForwarded:
// X-Forwarded-For, -Host and -Proto describe the client's connection, and
// whatever forwarding headers the client sent are dropped. f is called with
// the client's request and the upstream request's header, from which every
// incoming Forwarded and X-Forwarded-For, -Host and -Proto header has been
// removed; f decides which of the client's to keep (those of a trusted
// proxy) and what to add. A [Middleware] ignores it.
func WithForwarded(f func(in *http.Request, out http.Header)) Option {
	return option.Check("idemhttp", f != nil, func(c *config) { c.forwarded = f }, "nil forwarded func")
}

type cancelKey struct{}

// cancelOnClose ends a keyed upstream call's context when its response body
// is closed (ReverseProxy closes it after copying) or the call fails.
type cancelOnClose struct{ rt http.RoundTripper }

func (t cancelOnClose) RoundTrip(r *http.Request) (*http.Response, error) {
	cancel, _ := r.Context().Value(cancelKey{}).(context.CancelFunc)
	resp, err := t.rt.RoundTrip(r)
	if cancel == nil {
		return resp, err
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel, att: attemptOf(r.Context())}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
	att    *attempt
}

// Read notes a body that breaks off (reset, lease timeout, abort), so that
// the middleware completes the key as response-lost even when ReverseProxy
// does not panic (it panics only under an http.Server).
func (b *cancelBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.att != nil {
		b.att.bodyFailed.Store(true)
	}
	return n, err
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Abort cancels every upstream call in flight, for a shutdown that cannot
// wait any longer: an aborted request whose upstream had not answered yet
// answers 502 and releases its key, so the client's retry executes (on this
// or another proxy); one whose upstream status line had arrived is completed
// as response-lost. Requests that arrive after Abort fail the same way.
func (p *Proxy) Abort() { p.m.Abort() }

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.handler.ServeHTTP(w, r) }
