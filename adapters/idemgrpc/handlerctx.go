package idemgrpc

import (
	"context"
	"time"

	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// The handler's context is idemhttp's: it keeps the call's values (its
// metadata, peer, auth info) but not its cancellation, so a client that
// cancels or whose deadline passes does not cut the effect off half-way;
// the handler runs to its end, its response is stored, and the client's
// retry with the same key replays it. It ends when the lease is lost (a
// store that renews: taken over, released or not renewed in time, cause
// wrapping keystore.ErrLeaseLost; one that cannot: when the lease ends),
// when the handler timeout passes ([WithHandlerTimeout]), when the server
// aborts ([Interceptor.Abort]), or once the handler has returned.
// [WithClientCancel] restores grpc-go's behaviour.

// WithHandlerTimeout bounds how long a keyed call's handler runs: its
// context ends (Err context.DeadlineExceeded) d after it started. The
// default is no bound besides the lease: the client's deadline no longer
// bounds the handler, and idem cannot know how long an effect takes. Set
// it when a handler might hang on a call without a timeout of its own:
// with a store that renews leases, such a handler holds its key, and
// retries fail with IN_PROGRESS, until it returns.
func WithHandlerTimeout(d time.Duration) Option {
	return option.Check("idemgrpc", d >= 0, func(c *config) { c.handlerTimeout = d }, "handler timeout %v must not be negative", d)
}

// WithClientCancel(true) restores grpc-go's behaviour: the handler's
// context also ends when the client cancels or its deadline passes. A
// handler that then fails with a release code (Canceled,
// DeadlineExceeded, ...) has its key released and runs again on the
// client's retry, though its effect may have happened.
func WithClientCancel(cancel bool) Option {
	return func(c *config) error { c.clientCancel = cancel; return nil }
}

// KeyFrom returns the client's idempotency key, parsed, to the handler of a
// keyed call: pass it downstream, so that a repeat is absorbed there. ok is
// false outside a keyed call's handler.
func KeyFrom(ctx context.Context) (key string, ok bool) { return handlerctx.Key(ctx) }

// ClaimFrom returns the claim under which the handler of a keyed call runs.
// Pass its Token to downstream systems that fence stale writers, and look
// at Takeover to learn that an earlier holder's lease ran out (it may have
// acted). Its Expires is the lease's end when the key was reserved;
// renewals move it. ok is false outside a keyed call's handler.
func ClaimFrom(ctx context.Context) (keystore.Claim, bool) { return handlerctx.Claim(ctx) }

// Abort ends the context of every keyed handler in flight, and of those
// that start later, for a shutdown that cannot wait any longer: call it
// when grpc.Server.GracefulStop has not returned within the grace period,
// then let the handlers return, so that what they did is recorded (a
// handler that fails with a release code releases its key, and the
// client's retry executes elsewhere).
func (i *Interceptor) Abort() { i.aborted.Abort() }

func (i *Interceptor) handlerConfig() handlerctx.Config {
	return handlerctx.Config{Timeout: i.cfg.handlerTimeout, Abort: &i.aborted, ClientCancel: i.cfg.clientCancel}
}
