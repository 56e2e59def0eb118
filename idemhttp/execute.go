package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/keystore"
)

// attempt is what the proxy learns about one upstream call, shared with the
// middleware through the request's context.
type attempt struct {
	wrote      atomic.Bool // a connection to the upstream carried (some of) the request
	madeUp     atomic.Bool // the proxy answered itself: no upstream response
	bodyFailed atomic.Bool // the upstream's response body broke off
}

type attemptKey struct{}

func attemptOf(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// exchange is a keyed request's state, allocated once for the request.
type exchange struct {
	rec  recorder
	att  attempt
	jb   jsonBody
	body bodyReader
	hv   [hvCount]string // backing of the header values the middleware sets
}

// The header values the middleware sets, each one a slot of exchange.hv.
const (
	hvKey      = iota // Idempotency-Key, echoed
	hvReplayed        // Idempotent-Replayed
	hvLength          // Content-Length of a replay
	hvCount
)

// header returns a one-value header slice for slot i of x.hv: the
// request's own backing instead of the allocation Header.Set makes.
func (x *exchange) header(i int, v string) []string {
	x.hv[i] = v
	return x.hv[i : i+1 : i+1]
}

// bodyReader is the request body once the middleware has read it.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// setBody makes r's body read b from its start.
func (x *exchange) setBody(r *http.Request, b []byte) {
	x.body.Reset(b)
	r.Body, r.ContentLength = &x.body, int64(len(b))
}

// execute runs the handler under the claim and stores or releases the key.
// The handler runs under the context of internal/frontend/handlerctx: not cancelled
// by the client's disconnect; cancelled, with a cause wrapping
// keystore.ErrLeaseLost, if the lease is lost (renewed meanwhile when the
// store can, see keystore.KeepAlive), and by the handler timeout and Abort.
// Store calls after the handler use a context that the client's disconnect
// does not cancel: the effect has happened and must be recorded.
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, x *exchange, key string, claim keystore.Claim, echo string) Outcome {
	rec := &x.rec
	rec.init(w, &m.cfg, echo, bodyRoom(m.bodies.Value()))
	defer rec.resetDeadline()
	base := r.Context()
	if m.proxied {
		// The proxy's upstream call reports through the attempt.
		base = context.WithValue(base, attemptKey{}, &x.att)
	}
	hctx, run := handlerctx.Start(base, m.store, key, claim, m.cfg.lease, m.handlerConfig())
	var lost error // why the lease was lost while the handler ran, if it was
	finish := func() {
		if _, lost = run.Stop(); errors.Is(lost, keystore.ErrLeaseNotRenewed) {
			m.cfg.logger.WarnContext(base, "idemhttp: the lease could not be renewed in time while the handler ran; its context was cancelled", "err", lost)
		}
	}
	r = r.WithContext(hctx)
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			finish()
			m.took.Observe(time.Since(start))
			m.settle(base, claim, rec, &x.att, true, lost)
			panic(p)
		}
	}()
	next.ServeHTTP(rec, r)
	finish()
	m.took.Observe(time.Since(start))
	return m.settle(base, claim, rec, &x.att, false, lost)
}

// settle stores or releases the key once the handler has returned or
// panicked. The rule: once a status line that would be stored (below 500, or
// any with WithStore5xx) has been sent, the handler has acted, so the key is
// completed, with the response if it is whole, or as "response-lost" if the
// handler panicked or the upstream's body broke off. A response the proxy
// made up (the upstream never answered) is never stored.
//
// lost is why the lease was lost while the handler ran (nil if it was
// not). If the store refused a renewal (the key was released by an
// operator, taken over or swept), the key is no longer this claim's:
// nothing is released or stored, since the store would refuse either. A
// lease that could not be renewed in time (keystore.ErrLeaseNotRenewed) may
// still be this claim's, and is settled as usual.
func (m *Middleware) settle(ctx context.Context, claim keystore.Claim, rec *recorder, att *attempt, panicked bool, lost error) Outcome {
	storable := func() bool {
		return storedStatus(rec.status, &m.cfg)
	}
	if lost != nil && !errors.Is(lost, keystore.ErrLeaseNotRenewed) {
		if rec.status == 0 && !panicked {
			rec.WriteHeader(http.StatusOK) // handler wrote nothing: net/http sends 200
		}
		if storable() && !att.madeUp.Load() {
			m.cfg.logger.WarnContext(ctx, "idemhttp: the key was released by an operator (or taken over) while in progress; the handler's response was delivered but not stored, and a retry executes again", "status", rec.status, "err", lost)
		} else {
			m.cfg.logger.InfoContext(ctx, "idemhttp: the key was released by an operator (or taken over) while in progress; nothing to release", "status", rec.status, "err", lost)
		}
		return OutcomeLeaseLost
	}
	switch {
	case att.madeUp.Load():
		m.release(ctx, claim, "no upstream response")
		return OutcomeReleased
	case panicked || att.bodyFailed.Load():
		if !storable() {
			m.release(ctx, claim, "handler failed before a storable status")
			return OutcomeReleased
		}
		m.cfg.logger.WarnContext(ctx, "idemhttp: the handler answered, then failed mid-response; completing the key as response-lost", "status", rec.status)
		return m.complete(ctx, claim, (&record{status: rec.status, lost: true}).encode(), rec.status, OutcomeLost)
	}
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK) // handler wrote nothing: net/http sends 200
	}
	if !storable() {
		m.release(ctx, claim, strconv.Itoa(rec.status)+" is not stored")
		return OutcomeReleased
	}
	if rec.overflow || rec.streamed {
		return m.complete(ctx, claim, (&record{status: rec.status, notStored: true}).encode(), rec.status, OutcomeNotStored)
	}
	m.bodies.Observe(len(rec.out) - rec.bodyAt)
	return m.complete(ctx, claim, rec.out, rec.status, OutcomeExecuted)
}

// complete stores result, the encoded record of a response with status,
// under the claim; a record the store finds too large is stored as "not
// stored" instead.
func (m *Middleware) complete(ctx context.Context, claim keystore.Claim, result []byte, status int, o Outcome) Outcome {
	sctx, end := m.storeCall(ctx)
	defer end()
	noteStored(ctx, len(result))
	err := m.store.Complete(sctx, claim, result, m.cfg.ttl)
	if errors.Is(err, keystore.ErrResultTooLarge) && o == OutcomeExecuted {
		o = OutcomeNotStored
		err = m.store.Complete(sctx, claim, (&record{status: status, notStored: true}).encode(), m.cfg.ttl)
	}
	switch {
	case errors.Is(err, keystore.ErrLeaseLost):
		m.cfg.logger.WarnContext(sctx, "idemhttp: handler outlived its lease; response not stored (raise the lease)", "lease", m.cfg.lease)
		return OutcomeLeaseLost
	case err != nil:
		m.cfg.logger.ErrorContext(sctx, "idemhttp: storing the response failed; the key stays in progress until its lease ends", "err", err)
		return OutcomeStoreError
	}
	return o
}

// notExecuted are the statuses that say the request was refused before it
// was acted on and should be retried: storing one would refuse every retry
// for the TTL. They release the key in every mode, as a 5xx does by default.
var notExecuted = map[int]bool{
	http.StatusRequestTimeout:  true, // 408
	http.StatusTooEarly:        true, // 425
	http.StatusTooManyRequests: true, // 429
}

// storedStatus is the one rule of which answers are kept: none of the
// statuses that say "not acted on, retry" (notExecuted), 4xx unless
// WithStore4xx(false), 5xx only with WithStore5xx.
func storedStatus(status int, c *config) bool {
	switch {
	case status == 0 || notExecuted[status]:
		return false
	case status >= 500:
		return c.store5xx
	case status >= 400:
		return c.store4xx
	}
	return true
}

// retryAfter is the 409's hint, in seconds: how long executions take
// recently, minus how long the holder has run (its lease's age), bounded by
// the lease left and at least 1.
func (m *Middleware) retryAfter(c keystore.Claim) int {
	left := time.Until(c.Expires)
	age := m.cfg.lease - left
	hint := min(m.took.Value()-age, left)
	return max(1, int(math.Ceil(hint.Seconds())))
}
