package idemhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/idem-go/idem/keystore"
)

// Proxy is a reverse proxy that applies Idempotency-Key semantics in front of
// any HTTP API: [Middleware] around an httputil.ReverseProxy. Upstream
// failures (unreachable, reset, timed out) answer 502 and release the key, so
// a retry executes.
type Proxy struct {
	m        *Middleware
	rp       *httputil.ReverseProxy
	handler  http.Handler
	abortCtx context.Context
	abort    context.CancelFunc
}

// NewProxy returns a Proxy to target. The upstream call of a keyed request is
// bounded by the lease, so the proxy never acts on a key it no longer holds;
// it is not cancelled when the client disconnects, so that a response that
// was produced is stored for the client's retry.
func NewProxy(target *url.URL, s keystore.Store, opts ...Option) (*Proxy, error) {
	if target == nil || target.Scheme == "" || target.Host == "" {
		return nil, invalid("upstream URL %v must have a scheme and a host", target)
	}
	m, err := New(s, opts...)
	if err != nil {
		return nil, err
	}
	p := &Proxy{m: m}
	p.abortCtx, p.abort = context.WithCancel(context.Background())
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			if m.cfg.methods[pr.In.Method] && pr.In.Header.Get(HeaderKey) != "" {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(pr.In.Context()), m.cfg.lease)
				stop := context.AfterFunc(p.abortCtx, cancel)
				done := context.CancelFunc(func() { stop(); cancel() })
				pr.Out = pr.Out.WithContext(context.WithValue(ctx, cancelKey{}, done))
			}
		},
		Transport: cancelOnClose{upstreamTransport()},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			m.cfg.logger.WarnContext(r.Context(), "idemhttp: upstream failed", "err", err)
			m.problem(w, status, probUpstream, "the upstream request failed; the key was released and a retry will execute", nil)
		},
	}
	p.handler = m.Handler(p.rp)
	return p, nil
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
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Abort cancels every upstream call in flight, for a shutdown that cannot
// wait any longer: each aborted request answers 502 and releases its key, so
// the client's retry executes (on this or another proxy). Requests that
// arrive after Abort fail the same way.
func (p *Proxy) Abort() { p.abort() }

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.handler.ServeHTTP(w, r) }
