package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/idem-go/idem/keystore"
)

// Middleware applies Idempotency-Key semantics to a handler. It is safe for
// concurrent use and starts no goroutines.
type Middleware struct {
	store keystore.Store
	cfg   config
}

// New returns a Middleware that keeps keys and responses in s.
func New(s keystore.Store, opts ...Option) (*Middleware, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Middleware{store: s, cfg: cfg}, nil
}

// Handler wraps next.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		o := m.serve(w, r, next)
		if m.cfg.hooks != nil {
			m.cfg.hooks.Request(o, time.Since(start))
		}
	})
}

// storeKey derives the key in the store from the principal's scope and the
// client's key: a fixed-length digest, so scope and key may each be long,
// and no scope can name another's key.
func storeKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "http:" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) Outcome {
	if !m.cfg.methods[r.Method] {
		next.ServeHTTP(w, r)
		return OutcomePassThrough
	}
	key, err := ParseKey(r.Header, m.cfg.strict)
	switch {
	case errors.Is(err, ErrMissingKey) && !m.cfg.required:
		next.ServeHTTP(w, r)
		return OutcomePassThrough
	case errors.Is(err, ErrMissingKey):
		m.problem(w, http.StatusBadRequest, probMissingKey, "this endpoint requires an Idempotency-Key header on "+r.Method+" requests", nil)
		return OutcomeBadRequest
	case err != nil:
		m.problem(w, http.StatusBadRequest, probInvalidKey, err.Error(), nil)
		return OutcomeBadRequest
	}
	scope, err := m.cfg.scope(r)
	if err != nil {
		m.problem(w, http.StatusBadRequest, probBadScope, err.Error(), nil)
		return OutcomeBadRequest
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return OutcomeTooLarge
	}
	fp := Fingerprint(r, body, m.cfg.fpHeaders)
	sk := storeKey(scope, key)

	claim, err := m.reserve(r.Context(), sk, fp)
	switch {
	case errors.Is(err, keystore.ErrFingerprintMismatch):
		m.problem(w, http.StatusUnprocessableEntity, probMismatch, "the key was first used with a different method, path, query, body or fingerprinted header", nil)
		return OutcomeMismatch
	case err != nil:
		m.cfg.logger.ErrorContext(r.Context(), "idemhttp: store unavailable", "err", err)
		m.problem(w, http.StatusServiceUnavailable, probStore, "the request was not executed; retry later with the same key", map[string]string{"Retry-After": "1"})
		return OutcomeStoreError
	}
	switch claim.State {
	case keystore.Done:
		return m.replay(w, claim)
	case keystore.InProgress:
		retry := int(math.Ceil(time.Until(claim.Expires).Seconds()))
		retry = max(1, min(retry, int(m.cfg.lease/time.Second)+1))
		m.problem(w, http.StatusConflict, probInProgress, "a request with this key is being processed; retry after it completes", map[string]string{"Retry-After": strconv.Itoa(retry)})
		return OutcomeInProgress
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return m.execute(w, r, next, claim)
}

// reserve calls Reserve, waiting for an in-progress holder when configured.
func (m *Middleware) reserve(ctx context.Context, key string, fp []byte) (keystore.Claim, error) {
	deadline := time.Now().Add(m.cfg.wait)
	poll := 10 * time.Millisecond
	for {
		c, err := m.store.Reserve(ctx, key, fp, m.cfg.lease)
		if err != nil || c.State != keystore.InProgress || m.cfg.wait == 0 || time.Now().Add(poll).After(deadline) {
			return c, err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return c, nil
		case <-t.C:
		}
		poll = min(2*poll, 250*time.Millisecond)
	}
}

// readBody reads the whole request body up to the limit; a larger body is
// answered 413 before the store is touched.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := m.cfg.maxRequest
	if r.ContentLength > limit {
		m.problem(w, http.StatusRequestEntityTooLarge, probTooLarge, fmt.Sprintf("keyed request bodies are limited to %d bytes", limit), nil)
		return nil, false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		m.problem(w, http.StatusBadRequest, probInvalidKey, "reading the request body: "+err.Error(), nil)
		return nil, false
	}
	if int64(len(body)) > limit {
		m.problem(w, http.StatusRequestEntityTooLarge, probTooLarge, fmt.Sprintf("keyed request bodies are limited to %d bytes", limit), nil)
		return nil, false
	}
	return body, true
}

func (m *Middleware) replay(w http.ResponseWriter, c keystore.Claim) Outcome {
	rec, err := decodeRecord(c.Result)
	if err != nil {
		m.problem(w, http.StatusInternalServerError, probCorrupt, err.Error(), nil)
		return OutcomeStoreError
	}
	if rec.notStored {
		m.problem(w, http.StatusGone, probNotStored, fmt.Sprintf("the request was executed and answered %d, but the response was too large or streamed and was not kept; it will not be executed again", rec.status), map[string]string{HeaderReplayed: "true"})
		return OutcomeReplayed
	}
	h := w.Header()
	for name, vals := range rec.header {
		h[name] = vals
	}
	h.Set(HeaderReplayed, "true")
	h.Set("Content-Length", strconv.Itoa(len(rec.body)))
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body)
	return OutcomeReplayed
}

// execute runs the handler under the claim and stores or releases the key.
// Store calls after the handler use a context that the client's disconnect
// does not cancel: the effect has happened and must be recorded.
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, claim keystore.Claim) (o Outcome) {
	rec := newRecorder(w, m.cfg.maxResponse)
	storeCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(r.Context()), m.cfg.storeTimeout)
	}
	defer func() {
		if p := recover(); p != nil {
			ctx, cancel := storeCtx()
			defer cancel()
			if err := m.store.Release(ctx, claim); err != nil {
				m.cfg.logger.ErrorContext(ctx, "idemhttp: release after panic failed; the lease will expire", "err", err)
			}
			panic(p)
		}
	}()
	next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK) // handler wrote nothing: net/http sends 200
	}

	ctx, cancel := storeCtx()
	defer cancel()
	if rec.status >= 500 && !m.cfg.store5xx {
		if err := m.store.Release(ctx, claim); err != nil {
			m.cfg.logger.ErrorContext(ctx, "idemhttp: release failed; the lease will expire", "err", err)
		}
		return OutcomeReleased
	}
	stored := &record{status: rec.status, header: http.Header{}}
	o = OutcomeExecuted
	if rec.overflow || rec.streamed {
		stored.notStored = true
		o = OutcomeNotStored
	} else {
		for name, vals := range rec.header {
			if m.cfg.replay[name] {
				stored.header[name] = vals
			}
		}
		stored.body = rec.body.Bytes()
	}
	err := m.store.Complete(ctx, claim, stored.encode(), m.cfg.ttl)
	if errors.Is(err, keystore.ErrResultTooLarge) && !stored.notStored {
		stored = &record{status: rec.status, notStored: true}
		o = OutcomeNotStored
		err = m.store.Complete(ctx, claim, stored.encode(), m.cfg.ttl)
	}
	switch {
	case errors.Is(err, keystore.ErrLeaseLost):
		m.cfg.logger.WarnContext(ctx, "idemhttp: handler outlived its lease; response not stored (raise the lease)", "lease", m.cfg.lease)
		return OutcomeLeaseLost
	case err != nil:
		m.cfg.logger.ErrorContext(ctx, "idemhttp: storing the response failed; the key stays in progress until its lease ends", "err", err)
		return OutcomeStoreError
	}
	return o
}
