package idemhttp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/ewma"
	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/internal/frontend/keyclaim"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// Middleware applies Idempotency-Key semantics to a handler. It is safe for
// concurrent use and starts no goroutines.
type Middleware struct {
	store   keystore.Store
	cfg     config
	budget  *budget
	took    ewma.Duration
	bodies  ewma.Size        // the stored bodies' sizes, to size a record once
	aborted handlerctx.Abort // ends the handlers' contexts on Abort
	proxied bool             // a Proxy's: the handler's context carries the attempt
	quotas  *quotas          // WithQuota's accounting, else nil
}

// New returns a Middleware that keeps keys and responses in s. It does no
// I/O: call [keystore.Check] at start-up to learn that s is unreachable or
// not migrated (a SQL store whose Migrate was never called) before the
// first request does; the middleware answers every keyed request 500
// "store-not-migrated" while the store is not migrated.
func New(s keystore.Store, opts ...Option) (*Middleware, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	cfg := defaultConfig()
	if err := option.Apply("idemhttp", &cfg, opts); err != nil {
		return nil, err
	}
	if !cfg.keys.isDefault() && !cfg.requiredSet {
		cfg.required = true
	}
	b := cfg.budget
	if b == nil {
		b = &budget{max: cfg.maxBuffered}
	}
	if b.max < cfg.maxRequest+1 {
		return nil, invalid("max buffered bytes %d must exceed the request body limit %d", b.max, cfg.maxRequest)
	}
	m := &Middleware{store: s, cfg: cfg, budget: b}
	if cfg.quota != nil {
		m.quotas = newQuotas(*cfg.quota, cfg.ttl)
	}
	return m, nil
}

// Handler wraps next.
//
// Store calls run under a context that the client's disconnect does not
// cancel, bounded by the store timeout: a reservation is never left half
// made. If the client is gone once the key is reserved, the handler does not
// run and the key is released, so the retry executes. Once the handler
// runs, the client's disconnect does not cancel its context either (see
// [WithHandlerTimeout], [WithClientCancel] and [Middleware.Abort]), and its
// response is stored for the retry even if it cannot be delivered.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.cfg.hooks == nil {
			m.serveTraced(w, r, next)
			return
		}
		start := time.Now()
		o := m.serveTraced(w, r, next)
		m.report(r, o, time.Since(start))
	})
}

// storeKey derives the key in the store from the principal's scope and the
// client's key: a fixed-length digest, so scope and key may each be long,
// and no scope can name another's key.
func storeKey(scope, key string) string {
	var in [512]byte // a scope and a key of the usual sizes hash from the stack
	sum := sha256.Sum256(append(append(append(in[:0], scope...), 0), key...))
	var out [len("http:") + 43]byte
	copy(out[:], "http:")
	base64.RawURLEncoding.Encode(out[len("http:"):], sum[:])
	return string(out[:])
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler, sp idem.Span) Outcome {
	if !m.cfg.methods[r.Method] {
		next.ServeHTTP(w, r)
		return OutcomePassThrough
	}
	// A key in the body needs the body first, bounded as every keyed
	// body is; otherwise the key is checked before the body is read.
	x := &exchange{}
	jb := &x.jb
	read := false
	var held int64 // the body's bytes, held against the budget
	defer func() { m.budget.release(held) }()
	readOnce := func() Outcome {
		if read {
			return ""
		}
		read = true
		body, n, o := m.readBody(w, r)
		held, jb.raw = n, body
		if o == "" {
			x.setBody(r, body)
		}
		return o
	}
	if m.cfg.keys.needsBody(r) {
		if o := readOnce(); o != "" {
			return o
		}
	}
	key, sender, err := m.cfg.keys.extract(r, jb, m.cfg.strict)
	switch {
	case errors.Is(err, idem.ErrMissingKey) && !m.cfg.required:
		next.ServeHTTP(w, r)
		return OutcomePassThrough
	case errors.Is(err, idem.ErrMissingKey):
		m.problem(w, http.StatusBadRequest, probMissingKey, m.missingKeyDetail(r), nil)
		return OutcomeBadRequest
	case errors.Is(err, ErrJSONBody):
		m.problem(w, http.StatusBadRequest, probBadJSON, err.Error()+"; the request was not executed", nil)
		return OutcomeBadRequest
	case err != nil:
		m.problem(w, http.StatusBadRequest, probInvalidKey, err.Error(), nil)
		return OutcomeBadRequest
	}
	sp.Key(key)
	echo := ""
	if m.cfg.keys.isDefault() {
		// Echoed on every answer from here on (executed, replayed,
		// problem), as Stripe does, so that a client can correlate a
		// response with its key.
		echo = strings.Trim(r.Header.Get(HeaderKey), " \t")
		w.Header()[HeaderKey] = x.header(hvKey, echo)
	}
	scope, err := m.cfg.scopeOf(r)
	switch {
	case errors.Is(err, ErrNoPrincipal):
		m.problem(w, http.StatusBadRequest, probNoPrincipal, err.Error()+"; keyed requests must identify their principal so that no client is replayed another's response", nil)
		return OutcomeBadRequest
	case err != nil:
		m.problem(w, http.StatusBadRequest, probBadScope, err.Error(), nil)
		return OutcomeBadRequest
	}
	scope = senderScope(scope, sender)
	if o := readOnce(); o != "" {
		return o
	}
	fpBody, err := m.cfg.bodyFP.input(jb)
	if err != nil {
		m.problem(w, http.StatusBadRequest, probBadJSON, err.Error()+"; the request was not executed", nil)
		return OutcomeBadRequest
	}
	fp := Fingerprint(r, fpBody, m.cfg.fpHeaders)
	sk := storeKey(scope, key)

	claim, err := m.reserve(r.Context(), sk, fp)
	switch {
	case errors.Is(err, idem.ErrFingerprintMismatch):
		m.problem(w, http.StatusUnprocessableEntity, probMismatch, "the key was first used with a different method, path, query, body or fingerprinted header", nil)
		return OutcomeMismatch
	case errors.Is(err, keystore.ErrInProgress):
		m.problem(w, http.StatusConflict, probInProgress, "a request with this key is being processed; retry after it completes", map[string]string{"Retry-After": strconv.Itoa(m.retryAfter(claim))})
		return OutcomeInProgress
	case err != nil && errors.Is(err, r.Context().Err()):
		// The client left before or while the key was reserved: nobody
		// would get the answer, so do not act (Await gave back a key it
		// took); the retry executes.
		m.cfg.logger.DebugContext(r.Context(), "idemhttp: client gone before the handler ran", "err", err)
		return OutcomeClientGone
	case errors.Is(err, keystore.ErrNotMigrated):
		// Not transient: a 503 would have clients retry forever.
		m.cfg.logger.ErrorContext(r.Context(), "idemhttp: the key store is not migrated; call its Migrate (or apply its SchemaSQL) before serving", "err", err)
		m.problem(w, http.StatusInternalServerError, probNotMigrated, "the request was not executed: the idempotency key store is not migrated (its table does not exist); the operator must call the store's Migrate, or apply its SchemaSQL, and restart", nil)
		return OutcomeStoreError
	case err != nil:
		m.cfg.logger.ErrorContext(r.Context(), "idemhttp: store unavailable", "err", err)
		m.problem(w, http.StatusServiceUnavailable, probStore, "the request was not executed; retry later with the same key", map[string]string{"Retry-After": "1"})
		return OutcomeStoreError
	case claim.State == keystore.Done:
		return m.replay(w, x, claim)
	}
	x.setBody(r, jb.raw)
	if m.quotas != nil {
		return m.executeCounted(w, r, next, x, key, claim, echo, scope)
	}
	return m.execute(w, r, next, x, key, claim, echo)
}

// wait is how a request waits for a key in progress: WithWait's bound,
// polled by keystore.Await from 10ms up to 250ms with jitter, each Reserve
// bounded by the store timeout and not ended by the client's disconnect.
func (m *Middleware) wait() keystore.Wait {
	return keyclaim.Wait(m.cfg.storeTimeout, m.cfg.wait)
}

// release gives the key back, so that a retry executes. A stale token
// (ErrLeaseLost) means the key is already free or another's: an operator
// released it, or another request took it over once the lease lapsed.
func (m *Middleware) release(ctx context.Context, c keystore.Claim, why string) {
	sctx, end := m.storeCall(ctx)
	defer end()
	keyclaim.Release(sctx, m.store, c, m.cfg.logger, "idemhttp", why)
}

func (m *Middleware) replay(w http.ResponseWriter, x *exchange, c keystore.Claim) Outcome {
	// A stored response is decoded straight into w's header (parse checks
	// every field before it writes one); a problem answer (lost, not
	// stored) keeps its header out of w.
	var rec record
	h := w.Header()
	if problemRecord(c.Result) {
		h = http.Header{}
	}
	if err := rec.parse(c.Result, h); err != nil {
		m.problem(w, http.StatusInternalServerError, probCorrupt, err.Error(), nil)
		return OutcomeStoreError
	}
	switch {
	case rec.lost:
		m.problem(w, http.StatusBadGateway, probLost, fmt.Sprintf("the request was executed and answered %d, but the response was cut off before it was complete; it will not be executed again", rec.status), map[string]string{HeaderReplayed: "true"})
		return OutcomeReplayed
	case rec.notStored:
		m.problem(w, http.StatusGone, probNotStored, fmt.Sprintf("the request was executed and answered %d, but the response was too large or streamed and was not kept; it will not be executed again", rec.status), map[string]string{HeaderReplayed: "true"})
		return OutcomeReplayed
	}
	h[HeaderReplayed] = x.header(hvReplayed, "true")
	h["Content-Length"] = x.header(hvLength, strconv.Itoa(len(rec.body)))
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body)
	return OutcomeReplayed
}

// StoreKey returns the key under which the middleware keeps r's response
// in the store: a digest of r's scope (its principal, as the scope options
// say) and its key (from the Idempotency-Key header, or where
// [WithKeySource] says; a key in the body is read from r.Body). Operators
// use it to find a client's key (idem keys show); it does no store I/O. It
// fails as the middleware would answer 400: no key, an invalid one, or no
// principal.
func (m *Middleware) StoreKey(r *http.Request) (string, error) {
	jb := &jsonBody{}
	if m.cfg.keys.needsBody(r) && r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, m.cfg.maxRequest+1))
		if err != nil {
			return "", fmt.Errorf("idemhttp: reading the body: %w", err)
		}
		if int64(len(b)) > m.cfg.maxRequest {
			return "", fmt.Errorf("idemhttp: the body is larger than %d bytes", m.cfg.maxRequest)
		}
		jb.raw = b
	}
	key, sender, err := m.cfg.keys.extract(r, jb, m.cfg.strict)
	if err != nil {
		return "", err
	}
	scope, err := m.cfg.scopeOf(r)
	if err != nil {
		return "", err
	}
	return storeKey(senderScope(scope, sender), key), nil
}
