package idemgrpc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"google.golang.org/grpc/codes"
)

// Option configures an [Interceptor]; options are validated once, by [New].
type Option func(*config) error

// DefaultReleaseCodes returns the status codes that release the key
// instead of storing the response, so that a retry executes: the codes by
// which a handler says it did not act (Canceled, DeadlineExceeded, Aborted,
// ResourceExhausted from a limiter, Unavailable), and the server-error
// codes that the HTTP side releases as 5xx (Unknown, Internal,
// Unimplemented, DataLoss). Every other code, and success, is stored and
// replayed. Each call returns a new slice, to extend and pass to
// [WithReleaseCodes].
func DefaultReleaseCodes() []codes.Code {
	return []codes.Code{
		codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss,
	}
}

type config struct {
	methods        map[string]bool // nil: every unary method
	required       bool
	ttl, lease     time.Duration
	wait           time.Duration
	storeTimeout   time.Duration
	scope          func(ctx context.Context, fullMethod string) (string, error)
	allowAnonymous bool
	release        map[codes.Code]bool
	replay         map[string]bool
	maxResponse    int
	logger         *slog.Logger
	hooks          Hooks
	tracer         idem.Tracer
	handlerTimeout time.Duration // 0: none
	clientCancel   bool
}

func defaultConfig() config {
	c := config{
		ttl:          24 * time.Hour,
		lease:        30 * time.Second,
		storeTimeout: 5 * time.Second,
		scope:        authorizationScope,
		replay:       map[string]bool{},
		maxResponse:  1 << 20,
		logger:       slog.New(slog.DiscardHandler),
	}
	c.release = codeSet(DefaultReleaseCodes())
	return c
}

func codeSet(cs []codes.Code) map[codes.Code]bool {
	m := make(map[codes.Code]bool, len(cs))
	for _, c := range cs {
		m[c] = true
	}
	return m
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("idemgrpc: "+format+": %w", append(args, idem.ErrInvalidOption)...)
}

// WithMethods limits idempotency keys to the named unary methods, each a
// full method name ("/pkg.Service/Method"). Calls of other methods pass
// through without store I/O. By default every unary method honours a key.
func WithMethods(fullMethods ...string) Option {
	return func(c *config) error {
		if len(fullMethods) == 0 {
			return invalid("no methods")
		}
		c.methods = map[string]bool{}
		for _, m := range fullMethods {
			if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
				return invalid("method %q is not a full method name (/pkg.Service/Method)", m)
			}
			c.methods[m] = true
		}
		return nil
	}
}

// WithRequired makes a call without an idempotency key fail with
// InvalidArgument (reason [ReasonMissingKey]) before any store I/O, on the
// methods idempotency applies to. By default such a call passes through.
func WithRequired(required bool) Option {
	return func(c *config) error { c.required = required; return nil }
}

// WithTTL sets how long a completed response is replayed (default 24h),
// counted from completion by the store's clock. It must cover the clients'
// retry horizon.
func WithTTL(d time.Duration) Option {
	return option.Check("idemgrpc", d > 0, func(c *config) { c.ttl = d }, "ttl %v must be positive", d)
}

// WithLease sets how long a call holds its key while the handler runs
// (default 30s). With a store that renews leases (keystore.Extender), it is
// renewed every third of d while the handler runs, and the handler's
// context ends only if the lease is lost: d then bounds how long a crashed
// server keeps the key. With a store that cannot renew, the handler's
// context ends when the lease does; set the lease longer than the handler's
// longest run, because once it has ended a retry may execute concurrently.
func WithLease(d time.Duration) Option {
	return option.Check("idemgrpc", d > 0, func(c *config) { c.lease = d }, "lease %v must be positive", d)
}

// WithWait makes a call whose key is in progress wait up to d for the first
// call's response, and replay it, instead of failing at once with
// Unavailable (reason [ReasonInProgress]).
func WithWait(d time.Duration) Option {
	return option.Check("idemgrpc", d >= 0, func(c *config) { c.wait = d }, "wait %v must not be negative", d)
}

// WithStoreTimeout bounds each store call (default 5s). Store calls do not
// end with the client's cancellation: a call cancelled half-way may have
// committed, so each one runs to its end or to this timeout.
func WithStoreTimeout(d time.Duration) Option {
	return option.Check("idemgrpc", d > 0, func(c *config) { c.storeTimeout = d }, "store timeout %v must be positive", d)
}

// WithReleaseCodes replaces the status codes that release the key (default
// [DefaultReleaseCodes]). A handler error with a code not in the list is
// stored and replayed; pass no codes to store every error, as Stripe stores
// 5xx. OK cannot be listed.
func WithReleaseCodes(cs ...codes.Code) Option {
	return func(c *config) error {
		for _, code := range cs {
			if code == codes.OK || code > codes.Unauthenticated {
				return invalid("release code %v", code)
			}
		}
		c.release = codeSet(cs)
		return nil
	}
}

// WithReplayMetadata sets the response header and trailer keys that are
// stored and replayed (default: none). Keys are case-insensitive; reserved
// and per-call keys (grpc-*, :pseudo, content-type, date, user-agent, te,
// set-cookie, request ids, trace context, idempotency metadata) are
// refused, because they describe one call and must not be repeated.
func WithReplayMetadata(keys ...string) Option {
	return func(c *config) error {
		for _, k := range keys {
			k = strings.ToLower(strings.TrimSpace(k))
			if k == "" || neverReplayed(k) {
				return invalid("metadata key %q cannot be replayed", k)
			}
			c.replay[k] = true
		}
		return nil
	}
}

// WithMaxResponseSize sets the largest encoded response (message, status,
// replayed metadata) that is stored (default 1 MiB). A larger one is
// delivered and never re-executed; its replay fails with FailedPrecondition
// (reason [ReasonNotStored]). It must not exceed the store's result limit.
func WithMaxResponseSize(n int) Option {
	return option.Check("idemgrpc", n > 0, func(c *config) { c.maxResponse = n }, "max response size %d must be positive", n)
}

// WithLogger sets a logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return option.Check("idemgrpc", l != nil, func(c *config) { c.logger = l }, "nil logger")
}

// WithTracer traces every keyed call through t (idemotel.NewTracer for
// OpenTelemetry): a span (idem.OpGRPCCall) child of the span in the call's
// context, linked to the trace context in the call's metadata
// (traceparent), with the full method (idem.AttrRoute) and the key's hash,
// ended with the call's [Outcome] name; a span whose outcome is
// store_error or lease_lost is marked failed. The key store calls and the
// handler run under it. Calls that pass through (no key, method not
// configured) are not traced.
func WithTracer(t idem.Tracer) Option {
	return option.Check("idemgrpc", t != nil, func(c *config) { c.tracer = t }, "nil tracer")
}

var perCall = map[string]bool{
	"content-type": true, "date": true, "user-agent": true, "te": true, "set-cookie": true,
	"x-request-id": true, "request-id": true, "x-correlation-id": true, "traceparent": true,
	"tracestate": true, "grpc-trace-bin": true, MetadataKey: true, MetadataReplayed: true,
}

func neverReplayed(k string) bool {
	return perCall[k] || strings.HasPrefix(k, "grpc-") || strings.HasPrefix(k, ":")
}
