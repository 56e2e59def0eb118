package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/frontend/routeconfig"
	"github.com/idem-go/idem/keystore"
)

// policy is what one route (or the flags, for every request no route
// matches) does with a request.
type policy struct {
	passThrough              bool
	required, store5xx       bool
	ttl, lease               time.Duration
	methods, fpHeaders       []string
	scopeHeader, scopeCookie string
	anonymous                bool
	maxBody                  int64
	maxResponse              int
	store4xx                 *bool                     // nil: idemhttp's default (stored)
	keySource                *idemhttp.KeySource       // nil: the Idempotency-Key header
	bodyFP                   *idemhttp.BodyFingerprint // nil: the raw body
	quota                    *idemhttp.Quota           // nil: unbounded
}

// flagPolicy is the policy the flags set: that of requests no route of the
// --config file matches, and of every field a route omits.
func flagPolicy(f serveFlags) policy {
	return policy{
		required: f.requireKey, store5xx: f.store5x, ttl: f.ttl, lease: f.lease,
		methods:     strings.Split(f.methods, ","),
		scopeHeader: f.scopeHeader, scopeCookie: f.scopeCookie, anonymous: f.allowAnonymous,
		maxBody: f.maxBody, maxResponse: f.maxResponse,
	}
}

// with overrides p with the fields r sets. A scope, if set, replaces the
// flags' scope whole, --allow-anonymous included.
func (p policy) with(r route) policy {
	p.passThrough = r.passThrough
	if r.required != nil {
		p.required = *r.required
	}
	if r.store5xx != nil {
		p.store5xx = *r.store5xx
	}
	if r.ttl > 0 {
		p.ttl = r.ttl
	}
	if r.lease > 0 {
		p.lease = r.lease
	}
	if r.methods != nil {
		p.methods = r.methods
	}
	if r.fpHeaders != nil {
		p.fpHeaders = r.fpHeaders
	}
	if s := r.scope; s != nil {
		p.scopeHeader, p.scopeCookie, p.anonymous = s.Header, s.Cookie, s.Anonymous
	}
	if r.maxBody > 0 {
		p.maxBody = r.maxBody
	}
	if r.maxResponse > 0 {
		p.maxResponse = r.maxResponse
	}
	p.store4xx, p.keySource, p.bodyFP, p.quota = r.store4xx, r.keySource, r.bodyFP, r.quota
	return p
}

// settings is p as routeconfig's Settings, whose Options are the one
// implementation of each route rule (shared with the Caddy module).
func (p policy) settings() routeconfig.Settings {
	return routeconfig.Settings{
		Required: &p.required, Store5xx: &p.store5xx, Store4xx: p.store4xx,
		TTL: p.ttl, Lease: p.lease, Methods: p.methods, FingerprintHeaders: p.fpHeaders,
		Scope:     &routeconfig.Scope{Header: p.scopeHeader, Cookie: p.scopeCookie, Anonymous: p.anonymous},
		KeySource: p.keySource, BodyFingerprint: p.bodyFP, MaxBody: p.maxBody, MaxResponse: p.maxResponse,
		Quota: p.quota,
	}
}

// gateway serves every request under the policy set current when it
// arrived; a reload builds a new set whole and swaps it in atomically.
type gateway struct {
	f         serveFlags
	log       *slog.Logger
	target    *url.URL
	store     keystore.Store
	budget    *idemhttp.Budget
	transport http.RoundTripper
	forwarded func(in *http.Request, out http.Header)
	hooks     idemhttp.Hooks // nil: none
	outcomes  *outcomeLog    // per route, for the operator page
	held      *heldKeys      // nil unless the operator page is on
	plain     http.Handler   // pass-through: no key, no store I/O
	tracer    idem.Tracer    // nil: no spans (tracing.go)

	cur  atomic.Pointer[policySet]
	mu   sync.Mutex
	sets []*policySet // current and retired sets that may have requests in flight
}

func newGateway(f serveFlags, log *slog.Logger, target *url.URL, s keystore.Store, rt http.RoundTripper, fwd func(*http.Request, http.Header), hooks idemhttp.Hooks) (*gateway, error) {
	b, err := idemhttp.NewBudget(f.maxBuffered)
	if err != nil {
		return nil, err
	}
	g := &gateway{f: f, log: log, target: target, store: s, budget: b, transport: rt, forwarded: fwd, hooks: hooks, outcomes: newOutcomeLog()}
	g.plain = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			fwd(pr.In, pr.Out.Header)
			pr.Out.Host = pr.In.Host
		},
		Transport: rt,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.WarnContext(r.Context(), "idem serve: upstream failed (pass-through)", "err", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return g, nil
}

// policySet is the handlers of one configuration: a Proxy per keyed route,
// all sharing the gateway's store, budget and transport.
type policySet struct {
	mux       *http.ServeMux // for matching only: requests are never rewritten or redirected by it
	def       http.Handler
	byPattern map[string]http.Handler
	proxies   []*idemhttp.Proxy
	routes    int
	inflight  atomic.Int64
	retired   atomic.Int64 // when it was replaced (unix ns); 0 while current
}

// routeEntry is a matched route's handler, told apart from the mux's own
// redirect and not-found handlers.
type routeEntry struct{ h http.Handler }

func (e *routeEntry) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.h.ServeHTTP(w, r) }

// handler is the route's handler for r, or the flags' one. Where ServeMux
// would redirect (a path that is not clean, or /tree for a /tree/ pattern),
// the request keeps its path and gets the policy of the pattern the
// redirect would reach, which ServeMux.Handler names.
func (ps *policySet) handler(r *http.Request) http.Handler {
	h, p := ps.mux.Handler(r)
	if e, ok := h.(*routeEntry); ok {
		return e.h
	}
	if h, ok := ps.byPattern[p]; ok {
		return h
	}
	return ps.def
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ps := g.cur.Load()
	ps.inflight.Add(1)
	defer ps.inflight.Add(-1)
	ps.handler(r).ServeHTTP(w, r)
}

// build makes the policy set of routes (none: the flags' policy for every
// request). Each error names the route's file and line.
func (g *gateway) build(name string, routes []route) (*policySet, error) {
	base := flagPolicy(g.f)
	ps := &policySet{mux: http.NewServeMux(), byPattern: map[string]http.Handler{}, routes: len(routes)}
	def, err := g.handlerFor(base, defaultRoute)
	if err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	ps.def = def
	var errs []error
	for _, r := range routes {
		p := base.with(r)
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: %s:%d: %q: %s", errConfig, name, r.line, r.pattern, fmt.Sprintf(format, args...)))
		}
		if p.maxResponse > g.f.maxResponse {
			bad("max-response %d exceeds --max-response %d, the largest result the store was opened for", p.maxResponse, g.f.maxResponse)
			continue
		}
		if p.maxBody >= g.f.maxBuffered {
			bad("max-body %d must be below --max-buffered %d", p.maxBody, g.f.maxBuffered)
			continue
		}
		h, err := g.handlerFor(p, r.pattern)
		if err != nil {
			bad("%v", err)
			continue
		}
		if px, ok := h.(*idemhttp.Proxy); ok {
			ps.proxies = append(ps.proxies, px)
		}
		if err := register(ps.mux, r.pattern, &routeEntry{h}); err != nil {
			bad("%v", err)
		}
		ps.byPattern[r.pattern] = h
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if px, ok := def.(*idemhttp.Proxy); ok {
		ps.proxies = append(ps.proxies, px)
	}
	return ps, nil
}

// handlerFor builds the handler of policy p, its outcomes recorded under
// route.
func (g *gateway) handlerFor(p policy, route string) (http.Handler, error) {
	if p.passThrough {
		return g.plain, nil
	}
	// The front end's own options first; the route's rules are
	// routeconfig's, the same code the Caddy module runs.
	opts := []idemhttp.Option{
		idemhttp.WithWait(g.f.wait), idemhttp.WithStrictKey(g.f.strictKey), idemhttp.WithLogger(g.log),
		idemhttp.WithBodyTimeout(g.f.bodyTimeout), idemhttp.WithClientWriteTimeout(g.f.writeTimeout), idemhttp.WithBudget(g.budget),
		idemhttp.WithStoreTimeout(g.f.storeTimeout), idemhttp.WithUpstreamTransport(g.transport),
		idemhttp.WithForwarded(g.forwarded), idemhttp.WithHooks(g.outcomes.hooks(route, g.hooks)),
		idemhttp.WithRoute(route), idemhttp.WithHandlerTimeout(g.f.handlerTimeout),
	}
	opts = append(opts, g.traceOptions()...)
	opts = append(opts, p.settings().Options()...)
	store := g.store
	if g.held != nil {
		store = g.held.wrap(store, route)
	}
	return idemhttp.NewProxy(g.target, store, opts...)
}

// use makes ps the current set; requests already running keep theirs.
func (g *gateway) use(ps *policySet) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if old := g.cur.Swap(ps); old != nil {
		old.retired.Store(now.UnixNano())
	}
	// A retired set is forgotten once it has been idle for a minute: no
	// request can still be about to start under it.
	live := g.sets[:0]
	for _, s := range g.sets {
		if r := s.retired.Load(); r == 0 || s.inflight.Load() > 0 || now.Sub(time.Unix(0, r)) < time.Minute {
			live = append(live, s)
		}
	}
	g.sets = append(live, ps)
}

// loadFile parses the --config file, builds its policy set and makes it
// current. On any error the current set stays.
func (g *gateway) loadFile(path string) (*policySet, error) {
	routes, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	ps, err := g.build(path, routes)
	if err != nil {
		return nil, err
	}
	g.use(ps)
	return ps, nil
}

func readConfig(path string) ([]route, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, data)
}

// abort cancels the upstream calls in flight under every set.
func (g *gateway) abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.sets {
		for _, p := range s.proxies {
			p.Abort()
		}
	}
}
