package idemcaddy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/frontend/routeconfig"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the http.handlers.idempotency module. Its JSON fields are the
// Caddyfile's subdirectives; an omitted field takes idemhttp's default.
type Handler struct {
	// Store names the key store, as `idem serve --store` does: memory,
	// memory:SNAPSHOT-PATH, sqlite:PATH, postgres://…, redis://…,
	// redis-cluster://…, nats://…, dynamodb://…. Default: memory.
	Store string `json:"store,omitempty"`
	// Key is "required" (a keyed method without a key is 400) or
	// "optional" (it passes through). Default: optional, or required with
	// KeyFrom.
	Key string `json:"key,omitempty"`
	// TTL is how long a completed response is replayed. Default 24h.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// Lease is how long a request holds its key; renewed every third
	// while the upstream works. Default 30s.
	Lease caddy.Duration `json:"lease,omitempty"`
	// Wait makes a request whose key is in progress wait this long for
	// the first one's response instead of answering 409. Default 0.
	Wait caddy.Duration `json:"wait,omitempty"`
	// Methods are the methods that use keys. Default POST and PATCH.
	Methods []string `json:"methods,omitempty"`
	// KeyFrom says where the key is when not in Idempotency-Key.
	KeyFrom *KeyFrom `json:"key_from,omitempty"`
	// Fingerprint is what of the body a key is bound to: raw (default),
	// json (canonical JSON) or fields (FingerprintFields only).
	Fingerprint string `json:"fingerprint,omitempty"`
	// FingerprintFields are JMESPath expressions over the JSON body.
	FingerprintFields []string `json:"fingerprint_fields,omitempty"`
	// FingerprintHeaders are request headers added to the fingerprint.
	FingerprintHeaders []string `json:"fingerprint_headers,omitempty"`
	// Principal is what keys are scoped by. Default: a digest of the
	// Authorization header.
	Principal *Principal `json:"principal,omitempty"`
	// AllowAnonymous lets keyed requests without a principal share one
	// scope. Default false: they are 400 no-principal.
	AllowAnonymous bool `json:"allow_anonymous,omitempty"`
	// Store4xx says whether 4xx responses are stored (default true).
	Store4xx *bool `json:"store_4xx,omitempty"`
	// Store5xx says whether 5xx responses are stored (default false: the
	// key is released and a retry executes).
	Store5xx *bool `json:"store_5xx,omitempty"`
	// MaxBody is the largest keyed request body in bytes (default 8 MiB;
	// larger: 413).
	MaxBody int64 `json:"max_body,omitempty"`
	// MaxResponse is the largest response stored for replay in bytes
	// (default 1 MiB, at most 32 MiB).
	MaxResponse int `json:"max_response,omitempty"`
	// Quota bounds the keys and stored bytes of each principal and of all
	// of them together; past it a new key is 429 with Retry-After. Default:
	// unbounded.
	Quota *Quota `json:"quota,omitempty"`
	// StrictKey accepts only the Structured Field String form of the key.
	StrictKey bool `json:"strict_key,omitempty"`
	// StoreTimeout bounds each key-store call (default 5s).
	StoreTimeout caddy.Duration `json:"store_timeout,omitempty"`
	// HandlerTimeout bounds the upstream call of a keyed request (later:
	// 504, key released). Default: none besides the lease.
	HandlerTimeout caddy.Duration `json:"handler_timeout,omitempty"`
	// Route names the route in the metrics (idem_http_requests_total's
	// route label). Default "default".
	Route string `json:"route,omitempty"`

	mw       *idemhttp.Middleware
	route    string
	storeKey string // this handler's entry in the store pool
	metrics  *metricsEntry
}

// KeyFrom names where the requests carry their key: one of a header,
// CloudEvents (binary or structured mode), or a JMESPath expression over
// the JSON body.
type KeyFrom struct {
	Header      string `json:"header,omitempty"`
	CloudEvents bool   `json:"cloudevents,omitempty"`
	JSON        string `json:"json,omitempty"`
}

// Principal is what keys are scoped by: one of a header's value, a
// digest of a cookie, a digest of the Authorization header, or a digest
// of a Caddy placeholder's value ({http.auth.user.id} after
// basic_auth or forward_auth, say).
type Principal struct {
	Header        string `json:"header,omitempty"`
	Cookie        string `json:"cookie,omitempty"`
	Authorization bool   `json:"authorization,omitempty"`
	Placeholder   string `json:"placeholder,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

// maxResponseLimit is the largest MaxResponse, and what each store is
// opened for (with room for the stored headers): one store serves every
// handler that names it, whatever their MaxResponse.
const (
	maxResponseLimit = 32 << 20
	storeResultLimit = maxResponseLimit + 64<<10
)

// settings checks h's route settings with the rules idem serve's --config
// uses, and names each problem by its Caddyfile subdirective.
func (h *Handler) settings() (routeconfig.Settings, error) {
	var r routeconfig.Route
	if h.Key != "" {
		r.Key = &h.Key
	}
	dur := func(d caddy.Duration) *time.Duration {
		if d == 0 {
			return nil
		}
		v := time.Duration(d)
		return &v
	}
	r.TTL, r.Lease, r.Wait = dur(h.TTL), dur(h.Lease), dur(h.Wait)
	r.Methods, r.FingerprintHeaders = h.Methods, h.FingerprintHeaders
	if h.Methods != nil && len(h.Methods) == 0 {
		r.Methods = []string{}
	}
	if p := h.Principal; p != nil || h.AllowAnonymous {
		r.Scope = &routeconfig.Scope{Anonymous: h.AllowAnonymous, FuncName: "a {placeholder}"}
		if p != nil {
			r.Scope.Header, r.Scope.Cookie, r.Scope.Authorization = p.Header, p.Cookie, p.Authorization
			if p.Placeholder != "" {
				r.Scope.Func = placeholderScope(p.Placeholder)
			}
		}
	}
	r.Store4xx, r.Store5xx = h.Store4xx, h.Store5xx
	if k := h.KeyFrom; k != nil {
		r.KeyFrom = &routeconfig.KeyFrom{Header: k.Header, CloudEvents: k.CloudEvents, JSON: k.JSON}
	}
	if h.Fingerprint != "" {
		r.Fingerprint = &h.Fingerprint
	}
	r.FingerprintFields = h.FingerprintFields
	if h.MaxBody != 0 {
		r.MaxBody = &h.MaxBody
	}
	if h.MaxResponse != 0 {
		r.MaxResponse = &h.MaxResponse
	}
	if q := h.Quota; q != nil {
		r.Quota = &routeconfig.Quota{PrincipalKeys: string(q.PrincipalKeys), PrincipalBytes: string(q.PrincipalBytes), Keys: string(q.Keys), Bytes: string(q.Bytes)}
	}
	s, problems := routeconfig.Check(r)
	var errs []error
	for _, p := range problems {
		field := strings.ReplaceAll(strings.ReplaceAll(p.Field, "-", "_"), ".", " ")
		if field == "scope" {
			field = "principal"
		}
		errs = append(errs, fmt.Errorf("idempotency: %s: %s", field, caddyWords(p.Problem)))
	}
	if p := h.Principal; p != nil && p.Placeholder != "" && !(strings.HasPrefix(p.Placeholder, "{") && strings.HasSuffix(p.Placeholder, "}")) {
		errs = append(errs, fmt.Errorf("idempotency: principal: %q is not a placeholder (want one in braces, such as {http.auth.user.id})", p.Placeholder))
	}
	if h.MaxResponse > maxResponseLimit {
		errs = append(errs, fmt.Errorf("idempotency: max_response: %d is above the limit, %d (32 MiB)", h.MaxResponse, maxResponseLimit))
	}
	for _, d := range []struct {
		name string
		v    caddy.Duration
	}{{"store_timeout", h.StoreTimeout}, {"handler_timeout", h.HandlerTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("idempotency: %s: %v must not be negative", d.name, time.Duration(d.v)))
		}
	}
	return s, errors.Join(errs...)
}

// caddyWords turns routeconfig's field names in a problem into the
// Caddyfile's (fingerprint-fields: fingerprint_fields).
func caddyWords(s string) string {
	return strings.NewReplacer("fingerprint-fields", "fingerprint_fields", "fingerprint-headers", "fingerprint_headers",
		"key-from", "key_from", "principal-keys", "principal_keys", "principal-bytes", "principal_bytes", "fingerprint: ", "fingerprint ", "cloudevents: true", "cloudevents").Replace(s)
}

// placeholderScope scopes keys by a digest of a placeholder's value, so
// that a credential never lands in the store; an empty or unknown value is
// no principal.
func placeholderScope(ph string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		if !ok {
			return "", fmt.Errorf("%w (no Caddy replacer in the request)", idemhttp.ErrNoPrincipal)
		}
		v := repl.ReplaceKnown(ph, "")
		if v == "" {
			return "", fmt.Errorf("%w (%s is empty)", idemhttp.ErrNoPrincipal, ph)
		}
		sum := sha256.Sum256([]byte(v))
		return "caddy:" + hex.EncodeToString(sum[:16]), nil
	}
}

// Validate checks the settings without opening anything.
func (h *Handler) Validate() error {
	_, err := h.settings()
	return err
}

// Provision opens (or shares) the store, registers the metrics on Caddy's
// registry, and builds the middleware.
func (h *Handler) Provision(ctx caddy.Context) error {
	set, err := h.settings()
	if err != nil {
		return err
	}
	if h.Store == "" {
		h.Store = "memory"
	}
	st, key, err := acquireStore(ctx, h.Store)
	if err != nil {
		return err
	}
	h.storeKey = key
	h.route = cmpOr(h.Route, idemhttp.DefaultRoute)
	h.metrics, err = acquireMetrics(ctx)
	if err != nil {
		h.Cleanup()
		return err
	}
	opts := []idemhttp.Option{
		idemhttp.WithLogger(ctx.Slogger()), idemhttp.WithStrictKey(h.StrictKey), idemhttp.WithHooks(h.metrics.hooks),
		idemhttp.WithRoute(h.route),
	}
	if h.StoreTimeout > 0 {
		opts = append(opts, idemhttp.WithStoreTimeout(time.Duration(h.StoreTimeout)))
	}
	if h.HandlerTimeout > 0 {
		opts = append(opts, idemhttp.WithHandlerTimeout(time.Duration(h.HandlerTimeout)))
	}
	opts = append(opts, set.Options()...)
	if h.mw, err = idemhttp.New(st.Store(), opts...); err != nil {
		h.Cleanup()
		return fmt.Errorf("idempotency: %w", err)
	}
	return nil
}

func cmpOr(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// Cleanup lets go of the store (closed when no handler of any loaded
// config uses it) and of the metrics.
func (h *Handler) Cleanup() error {
	var errs []error
	if h.storeKey != "" {
		_, err := stores.Delete(h.storeKey)
		errs = append(errs, err)
		h.storeKey = ""
	}
	if h.metrics != nil {
		h.metrics.release()
		h.metrics = nil
	}
	return errors.Join(errs...)
}

// ServeHTTP runs the request through the middleware, with Caddy's next
// handler as the handler. An error from next (reverse_proxy's 502 when the
// upstream is down, say) is a failure of the handler: the key is released
// if no response had started, so that a retry executes (as for a panic,
// the one signal besides a status the middleware takes for "the handler
// failed"), and the error goes on to Caddy's error handling (handle_errors,
// the error log). Such a request is counted as released in the metrics; one
// whose response had started before the error (an upstream that broke off
// mid-body) is settled by idemhttp as for a panic and is not counted.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) (err error) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(nextFailed)
			if !ok {
				panic(p)
			}
			if !f.started {
				h.metrics.hooks.RequestRoute(h.route, idemhttp.OutcomeReleased, time.Since(start))
			}
			err = f.err
		}
	}()
	h.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		if err := next.ServeHTTP(sw, r); err != nil {
			panic(nextFailed{err: err, started: sw.started})
		}
	})).ServeHTTP(w, r)
	return nil
}

// nextFailed carries next's error through the middleware.
type nextFailed struct {
	err     error
	started bool // a final status had been written
}

// statusWriter notes whether next wrote a final status.
type statusWriter struct {
	http.ResponseWriter
	started bool
}

func (s *statusWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		s.started = true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.started = true
	return s.ResponseWriter.Write(p)
}

// Flush passes on a flush (reverse_proxy's streaming).
func (s *statusWriter) Flush() {
	s.started = true
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
