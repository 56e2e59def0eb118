package idemhttp

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idem-go/idem/keystore"
)

// Quota bounds what one route's Middleware lets its clients keep in the
// store: keys (in progress, or completed and not yet past their TTL) and
// the bytes of their stored responses, for each principal and for all of
// them together. A request with a new key that would take its principal,
// or the route, past a bound is answered 429 "quota-exceeded" with a
// Retry-After saying when the principal's (or the route's) oldest key
// expires, before the handler runs: the key it reserved is released, so
// the same request succeeds once there is room. Retries of keys already
// held (replays, 409 in-progress, 422) are answered as usual, whatever the
// quota says: a client at its bound can still collect its answers.
//
// The principal is the request's scope (see [WithPrincipal] and
// [WithScope]), and the sender for a key taken from an event
// ([WithKeySource]). Zero fields are unbounded; at least one key bound
// (PrincipalKeys or Keys) is required, since the accounting holds about
// 100 bytes of memory a key it counts.
//
// The count is the process's: it starts empty when the process starts,
// and several processes sharing one store each count what they admitted
// (a principal spread over n of them can keep n times its bound). It is a
// bound on growth, not a view of the store.
type Quota struct {
	PrincipalKeys  int   // keys one principal may hold
	PrincipalBytes int64 // stored response bytes one principal may hold
	Keys           int   // keys all principals together may hold
	Bytes          int64 // stored response bytes all principals together may hold
}

// WithQuota bounds what clients may keep in the store through this
// Middleware: see [Quota]. Give each route its own Middleware for bounds
// per route. A request refused by the quota is reported to [Hooks] as
// [OutcomeOverQuota].
func WithQuota(q Quota) Option {
	return func(c *config) error {
		switch {
		case q.PrincipalKeys < 0 || q.PrincipalBytes < 0 || q.Keys < 0 || q.Bytes < 0:
			return invalid("quota %+v: bounds must not be negative", q)
		case q.PrincipalKeys == 0 && q.Keys == 0:
			return invalid("quota %+v: set PrincipalKeys or Keys (or both): the accounting holds memory for each key it counts, so the keys must be bounded", q)
		}
		c.quota = &q
		return nil
	}
}

// keptOutcome reports whether a request that ran ended with its key kept
// in the store (completed), rather than given back.
func keptOutcome(o Outcome) bool {
	return o == OutcomeExecuted || o == OutcomeNotStored || o == OutcomeLost
}

// quotas is a Middleware's accounting for its Quota: the keys it admitted
// that are in progress, and those completed, in the order they completed
// (every key has the Middleware's TTL, so that is also the order in which
// they expire).
type quotas struct {
	q   Quota
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	total usage
	byP   map[string]*principalUsage
	queue []*ticket // completed, oldest first; queue[head:] are live
	head  int
}

type usage struct {
	keys  int
	bytes int64
}

type principalUsage struct {
	usage
	completed []*ticket // this principal's live completed keys, oldest first
	head      int
}

// ticket is one admitted key's place in the accounting.
type ticket struct {
	principal string
	bytes     int64     // the stored record's size, once completed
	expires   time.Time // once completed
	done      bool
}

func newQuotas(q Quota, ttl time.Duration) *quotas {
	return &quotas{q: q, ttl: ttl, now: time.Now, byP: map[string]*principalUsage{}}
}

// admit counts a new key for principal, or reports how long until the
// bound that refuses it has room.
func (qs *quotas) admit(principal string) (*ticket, time.Duration, bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	now := qs.now()
	qs.expire(now)
	p := qs.byP[principal]
	if p == nil {
		p = &principalUsage{}
	}
	over := func(u usage, keys int, bytes int64) bool {
		return keys > 0 && u.keys >= keys || bytes > 0 && u.bytes >= bytes
	}
	switch {
	case over(p.usage, qs.q.PrincipalKeys, qs.q.PrincipalBytes):
		return nil, waitFor(p.completed[p.head:], now), false
	case over(qs.total, qs.q.Keys, qs.q.Bytes):
		return nil, waitFor(qs.queue[qs.head:], now), false
	}
	qs.byP[principal] = p
	p.keys++
	qs.total.keys++
	return &ticket{principal: principal}, 0, true
}

// waitFor is how long until the oldest of live expires; a second if
// there is none (the bound is taken by keys in progress).
func waitFor(live []*ticket, now time.Time) time.Duration {
	if len(live) == 0 {
		return time.Second
	}
	return live[0].expires.Sub(now)
}

// settle records how t's key ended: kept in the store (t.bytes, until
// the TTL) or given back.
func (qs *quotas) settle(t *ticket, kept bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	p := qs.byP[t.principal]
	if !kept {
		p.keys--
		qs.total.keys--
		qs.forget(t.principal, p)
		return
	}
	t.done, t.expires = true, qs.now().Add(qs.ttl)
	p.bytes += t.bytes
	qs.total.bytes += t.bytes
	p.completed = append(p.completed, t)
	qs.queue = append(qs.queue, t)
}

// expire drops the completed keys whose TTL has passed.
func (qs *quotas) expire(now time.Time) {
	for qs.head < len(qs.queue) && !qs.queue[qs.head].expires.After(now) {
		t := qs.queue[qs.head]
		qs.queue[qs.head] = nil
		qs.head++
		p := qs.byP[t.principal]
		p.completed[p.head] = nil
		p.head++
		p.keys--
		p.bytes -= t.bytes
		qs.total.keys--
		qs.total.bytes -= t.bytes
		qs.forget(t.principal, p)
	}
	if qs.head > 64 && qs.head > len(qs.queue)/2 {
		qs.queue = append(qs.queue[:0], qs.queue[qs.head:]...)
		qs.head = 0
	}
}

// forget drops a principal that holds nothing, and compacts one that
// holds little of its queue.
func (qs *quotas) forget(principal string, p *principalUsage) {
	if p.keys == 0 {
		delete(qs.byP, principal)
		return
	}
	if p.head > 16 && p.head > len(p.completed)/2 {
		p.completed = append(p.completed[:0], p.completed[p.head:]...)
		p.head = 0
	}
}

// QuotaUsage is what a Middleware's quota counts now: see
// [Middleware.QuotaUsage].
type QuotaUsage struct {
	Principals int   // principals holding at least one key
	Keys       int   // keys held, all principals
	Bytes      int64 // stored response bytes held, all principals
}

// QuotaUsage reports what the Middleware's [Quota] counts now (expired
// keys dropped first), for metrics and operators; zero without WithQuota.
func (m *Middleware) QuotaUsage() QuotaUsage {
	qs := m.quotas
	if qs == nil {
		return QuotaUsage{}
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.expire(qs.now())
	return QuotaUsage{Principals: len(qs.byP), Keys: qs.total.keys, Bytes: qs.total.bytes}
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// executeCounted is execute under the Quota: a new key past a bound is
// released and answered 429 before the handler runs; one admitted is
// counted until it is given back or its TTL ends.
func (m *Middleware) executeCounted(w http.ResponseWriter, r *http.Request, next http.Handler, x *exchange, key string, claim keystore.Claim, echo, principal string) Outcome {
	t, wait, ok := m.quotas.admit(principal)
	if !ok {
		m.release(r.Context(), claim, "over quota")
		m.problem(w, http.StatusTooManyRequests, probQuota, "the request was not executed: this client (or this route) holds as many idempotency keys or stored bytes as it may until older keys expire; retry after the time Retry-After gives, with the same key", map[string]string{"Retry-After": retryAfterSeconds(wait)})
		return OutcomeOverQuota
	}
	o := m.execute(w, r.WithContext(withTicket(r.Context(), t)), next, x, key, claim, echo)
	m.quotas.settle(t, keptOutcome(o))
	return o
}

type ticketKey struct{}

// withTicket carries t to the store calls of the request's execution, so
// that complete can record the stored record's size.
func withTicket(ctx context.Context, t *ticket) context.Context {
	return context.WithValue(ctx, ticketKey{}, t)
}

// noteStored records n, the size of the record stored for the request of
// ctx, on its quota ticket if it has one.
func noteStored(ctx context.Context, n int) {
	if t, ok := ctx.Value(ticketKey{}).(*ticket); ok {
		t.bytes = int64(n)
	}
}
