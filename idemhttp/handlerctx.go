package idemhttp

import (
	"context"
	"time"

	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// The handler's context.
//
// A keyed request's handler (a [Proxy]'s upstream call too) runs under a
// context that keeps the request's values but is not cancelled when the
// client disconnects or times out: in an idempotency layer the client's
// retry is expected, and a handler cut off half-way (its provider call
// made with r.Context()) would answer 5xx, release the key and run the
// effect again on the retry. The handler runs to its end, its response is
// stored even though the client is gone, and the retry replays it. The
// context ends when
//
//   - the lease is lost: with a store that renews leases, if the key is
//     taken over or released or cannot be renewed in time (the cause wraps
//     keystore.ErrLeaseLost); with one that cannot, when the lease ends
//     (Err is context.DeadlineExceeded);
//   - the handler timeout passes ([WithHandlerTimeout]; Err is
//     context.DeadlineExceeded);
//   - the server aborts ([Middleware.Abort], [Proxy.Abort]);
//   - the handler has returned.
//
// [WithClientCancel] restores net/http's behaviour. The context also
// carries the parsed key ([KeyFrom]) and the claim ([ClaimFrom]).

// WithHandlerTimeout bounds how long a keyed request's handler runs: its
// context ends (Err context.DeadlineExceeded) d after it started. The
// default is no bound besides the lease: idem cannot know how long an
// effect takes, and a bound cut through an effect is what the detached
// context exists to avoid. Set it when a handler might hang on a call
// without a timeout of its own: with a store that renews leases, such a
// handler holds its key, and retries get 409, until it returns. A [Proxy]
// answers 504 when the bound ends its upstream call, and releases the key.
func WithHandlerTimeout(d time.Duration) Option {
	return option.Check("idemhttp", d >= 0, func(c *config) { c.handlerTimeout = d }, "handler timeout %v must not be negative", d)
}

// WithClientCancel(true) restores net/http's behaviour: the handler's
// context (and a [Proxy]'s upstream call) also ends when the client
// disconnects or times out. A handler that then fails (a 5xx, or a panic)
// has its key released and runs again on the client's retry, though its
// effect may have happened: use it only for handlers whose effects are
// idempotent downstream, or that check their context only before they act.
func WithClientCancel(cancel bool) Option {
	return func(c *config) error { c.clientCancel = cancel; return nil }
}

// KeyFrom returns the client's idempotency key, parsed (without the quotes
// of the Structured Field String form), to the handler of a keyed request:
// pass it downstream, to a payment provider's own Idempotency-Key, so that
// a repeat is absorbed there. ok is false outside a keyed request's handler.
func KeyFrom(ctx context.Context) (key string, ok bool) { return handlerctx.Key(ctx) }

// ClaimFrom returns, to the handler of a keyed request, the claim under
// which it runs. Pass its Token to downstream systems that reject writes
// from a stale holder (a token only grows over a key's life), and look at
// Takeover: true if an earlier holder's lease ran out without Complete or
// Release, so it may have acted before it died. Its Expires is the lease's
// end when the key was reserved; renewals move it. ok is false outside a
// keyed request's handler.
func ClaimFrom(ctx context.Context) (c keystore.Claim, ok bool) { return handlerctx.Claim(ctx) }

// Abort ends the context of every keyed handler in flight, and of those
// that start later, for a shutdown that cannot wait any longer (the cause
// is "the server aborted"): call it once http.Server.Shutdown's grace
// period has passed, then wait for the handlers to return, so that the
// middleware records what they did (a handler that answers 5xx releases
// its key, and the client's retry executes on another instance). See
// docs/http.md for the whole shutdown.
func (m *Middleware) Abort() { m.aborted.Abort() }

// handlerConfig is the handler contexts' configuration.
func (m *Middleware) handlerConfig() handlerctx.Config {
	return handlerctx.Config{Timeout: m.cfg.handlerTimeout, Abort: &m.aborted, ClientCancel: m.cfg.clientCancel}
}
