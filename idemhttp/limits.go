package idemhttp

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/internal/option"
)

// WithBodyTimeout bounds the time a keyed request's body may take to arrive
// (default 30s), counted from the moment the middleware starts reading it. A
// body that has not fully arrived by then (a client that sent its headers and
// stalled, or trickles a byte a second) is answered 408 "request-timeout"
// before any store I/O, and its connection is closed. The deadline is set on
// the connection with http.ResponseController and replaces the read deadline
// of a server whose ReadTimeout is longer; a server whose ReadTimeout is
// shorter or equal bounds the body by it instead (its deadline counts from
// the request's first byte), and the middleware sets none. Writers that
// cannot take deadlines (httptest recorders) are not bounded.
func WithBodyTimeout(d time.Duration) Option {
	return positiveDuration("body timeout", d, func(c *config) *time.Duration { return &c.bodyTimeout })
}

// WithClientWriteTimeout bounds each write of a keyed response to the client
// (default 30s). A client that stops reading would otherwise block the
// handler before its response is stored, until the lease ends and a retry
// executes again. When a write times out the client's copy is abandoned, the
// response is still recorded and stored, and the retry replays it. The
// bound starts once the response passes 2 KiB, or at a flush: net/http
// holds a smaller response in memory, and writes it after the handler.
func WithClientWriteTimeout(d time.Duration) Option {
	return positiveDuration("client write timeout", d, func(c *config) *time.Duration { return &c.writeTimeout })
}

// WithMaxBufferedBytes bounds the request bytes buffered by all keyed
// requests at once (default 128 MiB; at least the request body limit). Each
// keyed body is read whole to fingerprint it and held until its response is
// stored; a request that would take the total past n is answered at once
// with 503 "busy" and Retry-After: 1, before any store I/O, instead of
// growing the process.
func WithMaxBufferedBytes(n int64) Option {
	return option.Check("idemhttp", n > 0, func(c *config) { c.maxBuffered = n }, "max buffered bytes %d must be positive", n)
}

// WithStreamContentTypes replaces the media types whose responses are
// streams (default text/event-stream): they are passed to the client as they
// are written and never stored; a retry gets 410 "response-not-stored".
// Responses of other types are buffered and stored up to the response limit
// even when the handler flushes or their length is unknown (chunked);
// flushes still reach the client at once. A handler that hijacks the
// connection is always a stream.
func WithStreamContentTypes(types ...string) Option {
	return func(c *config) error {
		c.streamTypes = map[string]bool{}
		for _, t := range types {
			mt, _, err := mime.ParseMediaType(t)
			if err != nil {
				return invalid("stream content type %q: %v", t, err)
			}
			c.streamTypes[mt] = true
		}
		return nil
	}
}

// budget accounts the request bytes buffered at once.
type budget struct {
	max  int64
	used atomic.Int64
	peak atomic.Int64
}

func (b *budget) acquire(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

func (b *budget) release(n int64) { b.used.Add(-n) }

const minBodyStep = 32 << 10

// serverReadTimeout is the ReadTimeout of the net/http server that serves r
// (0 when it has none, or r did not come through an http.Server).
func serverReadTimeout(r *http.Request) time.Duration {
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok {
		return srv.ReadTimeout
	}
	return 0
}

// bodyLate is the 408's detail for a body that did not arrive within bound,
// the middleware's body timeout (own) or the server's ReadTimeout.
func bodyLate(bound time.Duration, own bool) string {
	if own {
		return fmt.Sprintf("the request body did not arrive within %v; the request was not executed", bound)
	}
	return fmt.Sprintf("the request body did not arrive within the server's read timeout (%v, counted from the request's first byte); the request was not executed", bound)
}

// readBody reads the whole request body up to the limit, under the body
// deadline and within the buffered-bytes budget. A larger body is answered
// 413, a late one 408, one over the budget 503, all before the store is
// touched. held is what it took from the budget, even when it fails: give
// it back (budget.release) when the body is no longer held.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) (body []byte, held int64, o Outcome) {
	limit := m.cfg.maxRequest
	if r.ContentLength > limit {
		m.tooLarge(w)
		return nil, held, OutcomeTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, held, ""
	}
	// The deadline is lifted only once the whole body is read. On a failure
	// it stays, so that net/http's discard of the unread rest fails at once
	// and the connection closes, instead of waiting on the client for ever.
	//
	// A server that bounds the whole request's read (http.Server's
	// ReadTimeout) at least as tightly has its deadline on the connection
	// already: it stands, and no second one is set and lifted (a runtime
	// timer armed and stopped: 4% of a new key's CPU in-process).
	rc := http.NewResponseController(w)
	bound, own, deadlined := m.cfg.bodyTimeout, true, false
	if t := serverReadTimeout(r); t > 0 && t <= bound {
		bound, own = t, false
	} else {
		deadlined = rc.SetReadDeadline(time.Now().Add(bound)) == nil
	}
	step := int64(minBodyStep)
	if r.ContentLength >= 0 {
		step = r.ContentLength + 1 // room to see EOF
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				m.tooLarge(w)
				return nil, held, OutcomeTooLarge
			}
			n := min(max(step, int64(cap(buf))), limit+1-int64(cap(buf)))
			if !m.budget.acquire(n) {
				w.Header().Set("Connection", "close")
				m.problem(w, http.StatusServiceUnavailable, probBusy, "too many request bodies are being held; the request was not executed, retry later with the same key", map[string]string{"Retry-After": "1"})
				return nil, held, OutcomeBusy
			}
			held += n
			nb := make([]byte, len(buf), int64(cap(buf))+n)
			copy(nb, buf)
			buf = nb
		}
		k, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			w.Header().Set("Connection", "close")
			if errors.Is(err, os.ErrDeadlineExceeded) {
				m.problem(w, http.StatusRequestTimeout, probTimeout, bodyLate(bound, own), nil)
				return nil, held, OutcomeTimeout
			}
			m.problem(w, http.StatusBadRequest, probBodyRead, "reading the request body: "+err.Error(), nil)
			return nil, held, OutcomeBadRequest
		}
	}
	if int64(len(buf)) > limit {
		m.tooLarge(w)
		return nil, held, OutcomeTooLarge
	}
	if deadlined {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return buf, held, ""
}

func (m *Middleware) tooLarge(w http.ResponseWriter) {
	m.problem(w, http.StatusRequestEntityTooLarge, probTooLarge, fmt.Sprintf("keyed request bodies are limited to %d bytes", m.cfg.maxRequest), nil)
}

// isStream reports whether a response of this Content-Type is a stream.
func (c *config) isStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return c.streamTypes[strings.ToLower(strings.TrimSpace(mt))]
}

// WithStoreTimeout bounds each key-store call (default 5s). Store calls are
// not cancelled by the client's disconnect, since a call cancelled half-way
// may have committed; this is their only bound. A Reserve that times out
// answers 503; if it had committed regardless, the key stays in progress
// until its lease ends.
func WithStoreTimeout(d time.Duration) Option {
	return positiveDuration("store timeout", d, func(c *config) *time.Duration { return &c.storeTimeout })
}

// positiveDuration is an option that sets a duration that must be positive.
func positiveDuration(what string, d time.Duration, field func(*config) *time.Duration) Option {
	return option.Check("idemhttp", d > 0, func(c *config) { *field(c) = d }, "%s %v must be positive", what, d)
}

// Budget bounds the request bytes buffered at once by every [Middleware] and
// [Proxy] it is given to with [WithBudget], as [WithMaxBufferedBytes] bounds
// one Middleware's: a gateway with one Middleware per route shares one bound
// instead of multiplying it by the number of routes.
type Budget struct{ b budget }

// NewBudget returns a Budget of maxBytes; it must be positive.
func NewBudget(maxBytes int64) (*Budget, error) {
	if maxBytes <= 0 {
		return nil, invalid("budget %d must be positive", maxBytes)
	}
	return &Budget{b: budget{max: maxBytes}}, nil
}

// Used reports the bytes held against the budget now.
func (b *Budget) Used() int64 { return b.b.used.Load() }

// WithBudget accounts the Middleware's buffered request bytes in b, shared
// with every other Middleware given b; it replaces [WithMaxBufferedBytes].
// b's bound must exceed the request body limit.
func WithBudget(b *Budget) Option {
	return option.Check("idemhttp", b != nil, func(c *config) { c.budget = &b.b }, "nil budget")
}
