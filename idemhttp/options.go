package idemhttp

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
)

// Option configures a [Middleware] or [Proxy]; options are validated once, by
// [New] or [NewProxy].
type Option func(*config) error

// DefaultReplayHeaders returns the response headers stored and replayed
// unless [WithReplayHeaders] says otherwise: those that describe the stored
// representation, without which its body cannot be read (Stripe stores the
// status and the body; these are the body's metadata). Retry-After is not
// among them: a stored response is final, and telling the client to retry
// it is wrong. The original response's Request-Id or X-Request-Id is
// replayed as Original-Request, as Stripe does. Each call returns a new
// slice, to extend and pass to WithReplayHeaders.
func DefaultReplayHeaders() []string {
	return []string{
		"Content-Type", "Content-Encoding", "Content-Language", "Content-Disposition",
		"Content-Location", "Location", "ETag", "Last-Modified", "Link", "Cache-Control",
		"Expires", "Vary",
	}
}

// neverReplayed are dropped from the allow list whatever the configuration
// says: they describe one response (Date, request ids), one connection
// (hop-by-hop), or carry credentials or quotas that must not be repeated.
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Date": true, "Connection": true, "Keep-Alive": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
	"X-Request-Id": true, "X-Correlation-Id": true, "Traceparent": true, "Tracestate": true,
	"Ratelimit": true, "Ratelimit-Policy": true, "Ratelimit-Limit": true, "Ratelimit-Remaining": true,
	"Ratelimit-Reset": true, "X-Ratelimit-Limit": true, "X-Ratelimit-Remaining": true, "X-Ratelimit-Reset": true,
	"Idempotent-Replayed": true, "Idempotency-Key": true, "Request-Id": true, "Original-Request": true,
}

type config struct {
	methods      map[string]bool
	required     bool
	strict       bool
	ttl, lease   time.Duration
	wait         time.Duration
	store5xx     bool
	store4xx     bool       // default true (WithStore4xx)
	requiredSet  bool       // WithRequired was given
	keys         keySpec    // WithKeySource
	bodyFP       bodyFPSpec // WithBodyFingerprint
	scope        func(*http.Request) (string, error)
	fpHeaders    []string
	maxRequest   int64
	maxResponse  int
	replay       map[string]bool
	docs         string
	logger       *slog.Logger
	hooks        Hooks
	quota        *Quota      // WithQuota's, else nil
	tracer       idem.Tracer // nil: no spans (trace.go)
	storeTimeout time.Duration

	allowAnonymous bool
	bodyTimeout    time.Duration // keyed request body read deadline
	writeTimeout   time.Duration // per write to the client
	maxBuffered    int64         // all keyed request bodies held at once
	budget         *budget       // shared with other Middlewares (WithBudget), else nil
	transport      http.RoundTripper
	forwarded      func(in *http.Request, out http.Header)
	streamTypes    map[string]bool
	handlerTimeout time.Duration // 0: none
	clientCancel   bool
	route          string // WithRoute; "": the ServeMux pattern
}

func defaultConfig() config {
	c := config{
		methods:      map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		ttl:          24 * time.Hour,
		lease:        30 * time.Second,
		store4xx:     true,
		scope:        authorizationScope,
		maxRequest:   8 << 20,
		maxResponse:  1 << 20,
		docs:         "https://github.com/idem-go/idem/blob/main/docs/http.md",
		logger:       slog.New(slog.DiscardHandler),
		storeTimeout: 5 * time.Second,
		bodyTimeout:  30 * time.Second,
		writeTimeout: 30 * time.Second,
		maxBuffered:  128 << 20,
		streamTypes:  map[string]bool{"text/event-stream": true},
	}
	c.replay = headerSet(DefaultReplayHeaders())
	return c
}

func headerSet(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		n = http.CanonicalHeaderKey(strings.TrimSpace(n))
		if !neverReplayed[n] {
			m[n] = true
		}
	}
	return m
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("idemhttp: "+format+": %w", append(args, idem.ErrInvalidOption)...)
}

// WithMethods sets the methods that use idempotency keys (default POST and
// PATCH). Requests with other methods pass through without store I/O.
func WithMethods(methods ...string) Option {
	return func(c *config) error {
		if len(methods) == 0 {
			return invalid("no methods")
		}
		c.methods = map[string]bool{}
		for _, m := range methods {
			m = strings.ToUpper(strings.TrimSpace(m))
			if m == "" || strings.ContainsAny(m, " \t,") {
				return invalid("method %q", m)
			}
			c.methods[m] = true
		}
		return nil
	}
}

// WithRequired makes a missing Idempotency-Key a 400 on configured methods.
// Under a [WithKeySource] other than the Idempotency-Key header, a key is
// required unless WithRequired(false) is given.
func WithRequired(required bool) Option {
	return func(c *config) error { c.required, c.requiredSet = required, true; return nil }
}

// WithStrictKey accepts only the Structured Field String form ("abc"),
// rejecting the bare tokens most SDKs send.
func WithStrictKey(strict bool) Option {
	return func(c *config) error { c.strict = strict; return nil }
}

// WithTTL sets how long a completed response is replayed (default 24h),
// counted from completion by the store's clock. It must cover the clients'
// retry horizon.
func WithTTL(d time.Duration) Option {
	return positiveDuration("ttl", d, func(c *config) *time.Duration { return &c.ttl })
}

// WithLease sets how long a request holds its key while running (default
// 30s). With a store that renews leases (keystore.Extender), the lease is
// renewed every third of d while the handler runs, so d bounds how long a
// crashed instance keeps the key, not how long the handler may take; the
// handler's context (and the proxy's upstream call) is cancelled if the
// lease is lost. With a store that cannot renew, set it longer than the
// handler's longest run: once it ends, a retry may execute concurrently;
// the proxy cancels the upstream call when the lease ends.
func WithLease(d time.Duration) Option {
	return positiveDuration("lease", d, func(c *config) *time.Duration { return &c.lease })
}

// WithWait makes a request whose key is in progress wait up to d for the
// first request's response, and replay it, instead of answering 409.
func WithWait(d time.Duration) Option {
	return option.Check("idemhttp", d >= 0, func(c *config) { c.wait = d }, "wait %v must not be negative", d)
}

// WithStore5xx stores and replays 5xx responses too, as Stripe does. By
// default a 5xx releases the key so that a retry executes.
func WithStore5xx(store bool) Option {
	return func(c *config) error { c.store5xx = store; return nil }
}

// WithStore4xx says whether 4xx responses are stored and replayed (default
// true, as Stripe does: a request refused for what it is gets the same
// refusal on every retry). With false, a 4xx releases the key, as a 5xx
// does by default, so that a retry executes again: for APIs whose 4xx
// answers depend on state that changes (a 404 for a resource not created
// yet, a 402 until a card is updated, a 409 on a version). 408, 425 and
// 429 release the key in every mode.
func WithStore4xx(store bool) Option {
	return func(c *config) error { c.store4xx = store; return nil }
}

// WithFingerprintHeaders adds request headers to the fingerprint (the
// method, path, query and body are always in it).
func WithFingerprintHeaders(headers ...string) Option {
	return func(c *config) error {
		for _, h := range headers {
			h = http.CanonicalHeaderKey(strings.TrimSpace(h))
			if h == "" {
				return invalid("empty fingerprint header")
			}
			c.fpHeaders = append(c.fpHeaders, h)
		}
		return nil
	}
}

// WithMaxRequestBody sets the largest request body accepted on keyed requests
// (default 8 MiB); larger ones get 413 before any store I/O.
func WithMaxRequestBody(n int64) Option {
	return option.Check("idemhttp", n > 0, func(c *config) { c.maxRequest = n }, "max request body %d must be positive", n)
}

// WithMaxResponseBody sets the largest response body stored for replay
// (default 1 MiB). A larger response is delivered and never re-executed;
// its replay is a 410 problem response. It must not exceed the store's
// result limit.
func WithMaxResponseBody(n int) Option {
	return option.Check("idemhttp", n > 0, func(c *config) { c.maxResponse = n }, "max response body %d must be positive", n)
}

// WithReplayHeaders replaces the allow list of response headers stored and
// replayed. Headers that must never be replayed (Set-Cookie, Date,
// hop-by-hop, request ids, rate limits) are dropped from it.
func WithReplayHeaders(headers ...string) Option {
	return func(c *config) error { c.replay = headerSet(headers); return nil }
}

// WithDocsURL sets the documentation page problem types link to.
func WithDocsURL(u string) Option {
	return option.Check("idemhttp", u != "", func(c *config) { c.docs = u }, "empty docs URL")
}

// WithLogger sets a logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return option.Check("idemhttp", l != nil, func(c *config) { c.logger = l }, "nil logger")
}

// WithHooks installs an observer of every keyed request's outcome.
func WithHooks(h Hooks) Option {
	return option.Check("idemhttp", h != nil, func(c *config) { c.hooks = h }, "nil hooks")
}

// Hooks observes the middleware without tying it to a metrics library.
type Hooks interface {
	// Request is called once per request with its outcome and the time the
	// middleware spent, handler included.
	Request(o Outcome, d time.Duration)
}

// Outcome is what the middleware did with one request.
type Outcome string

// The outcomes reported to [Hooks].
const (
	OutcomePassThrough Outcome = "pass_through" // method not keyed, or no key and not required
	OutcomeExecuted    Outcome = "executed"     // handler ran, response stored
	OutcomeReleased    Outcome = "released"     // handler ran, 5xx or panic: key released
	OutcomeNotStored   Outcome = "not_stored"   // handler ran, response too large or streamed
	OutcomeReplayed    Outcome = "replayed"
	OutcomeInProgress  Outcome = "in_progress" // 409
	OutcomeMismatch    Outcome = "mismatch"    // 422
	OutcomeBadRequest  Outcome = "bad_request" // 400: missing or invalid key, bad or missing principal
	OutcomeTooLarge    Outcome = "too_large"   // 413
	OutcomeStoreError  Outcome = "store_error" // 503
	OutcomeLeaseLost   Outcome = "lease_lost"  // the lease was lost while the handler ran (not renewed, or released by an operator); response not stored
	OutcomeLost        Outcome = "lost"        // handler answered non-5xx, then failed mid-body: completed as "response-lost"
	OutcomeClientGone  Outcome = "client_gone" // the client left before the handler ran: a key reserved for it was released
	OutcomeBusy        Outcome = "busy"        // 503: the buffered-bytes bound was reached
	OutcomeOverQuota   Outcome = "over_quota"  // 429: a new key past the principal's or the route's Quota; released, not run
	OutcomeTimeout     Outcome = "timeout"     // 408: the request body did not arrive in time
)
