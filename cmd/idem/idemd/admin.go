package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// minAdminToken is the shortest admin token accepted, in bytes.
const minAdminToken = 16

// readAdminToken reads the bearer token of the admin API from path: the
// file's content without surrounding whitespace, at least minAdminToken
// bytes.
func readAdminToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < minAdminToken {
		return nil, fmt.Errorf("--admin-token-file %s: the token is %d bytes, want at least %d (e.g. openssl rand -hex 32)", path, len(b), minAdminToken)
	}
	return b, nil
}

// adminKeys serves the key API of idem serve's admin listener, every
// request authenticated by "Authorization: Bearer <token>":
//
//	GET  /admin/keys?state=in_progress|done&limit=N&after=CURSOR  {"keys": [...], "next": "..."}
//	GET  /admin/keys/{key}                                        one key (404 if absent)
//	POST /admin/keys/{key}/release?token=T                        fenced release (409 if T is stale)
//	POST /admin/keys/{key}/forget                                 delete a done key (409 if in progress)
//
// Keys are path segments, percent-encoded as needed.
func adminKeys(s keystore.Store, token []byte, log *slog.Logger) http.Handler {
	want := sha256.Sum256(token)
	mux := http.NewServeMux()
	a := &admin{s: s, log: log}
	mux.HandleFunc("GET /admin/keys", a.list)
	mux.HandleFunc("GET /admin/keys/{key}", a.show)
	mux.HandleFunc("POST /admin/keys/{key}/release", a.release)
	mux.HandleFunc("POST /admin/keys/{key}/forget", a.forget)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		// Compared as digests, in constant time: neither the token nor its
		// length leaks through timing.
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem admin"`)
			adminError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type admin struct {
	s   keystore.Store
	log *slog.Logger
}

func adminJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func adminError(w http.ResponseWriter, status int, msg string) {
	adminJSON(w, status, map[string]string{"error": msg})
}

// adminStatus is the HTTP status err's sentinel calls for.
func adminStatus(err error) int {
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, keystore.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, keystore.ErrLeaseLost), errors.Is(err, keystore.ErrInProgress):
		return http.StatusConflict
	case errors.Is(err, idem.ErrInvalidArgument), errors.Is(err, idem.ErrInvalidKey):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// fail answers err with the status its sentinel calls for.
func (a *admin) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := adminStatus(err)
	if status == http.StatusInternalServerError {
		a.log.ErrorContext(r.Context(), "admin: key store call failed", "path", r.URL.Path, "err", err)
	}
	adminError(w, status, err.Error())
}

func (a *admin) list(w http.ResponseWriter, r *http.Request) {
	in, err := inspector(a.s)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	st, err := keystore.ParseState(q.Get("state"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	limit := 0
	if l := q.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil {
			adminError(w, http.StatusBadRequest, "limit: want an integer")
			return
		}
	}
	keys, next, err := in.List(r.Context(), keystore.ListOptions{State: st, After: q.Get("after"), Limit: limit})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	now := time.Now()
	views := make([]keyView, 0, len(keys))
	for _, k := range keys {
		views = append(views, viewOf(k, now))
	}
	adminJSON(w, http.StatusOK, struct {
		Keys []keyView `json:"keys"`
		Next string    `json:"next,omitempty"`
	}{views, next})
}

func (a *admin) show(w http.ResponseWriter, r *http.Request) {
	in, err := inspector(a.s)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	k, err := in.Inspect(r.Context(), r.PathValue("key"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	adminJSON(w, http.StatusOK, viewOf(k, time.Now()))
}

func (a *admin) release(w http.ResponseWriter, r *http.Request) {
	tok, err := strconv.ParseUint(r.URL.Query().Get("token"), 10, 64)
	if err != nil || tok == 0 {
		adminError(w, http.StatusBadRequest, "token: want the key's token (a positive integer) from GET /admin/keys/{key}")
		return
	}
	key := r.PathValue("key")
	if err := operatorRelease(r.Context(), a.s, a.log, key, tok, "api"); err != nil {
		a.fail(w, r, err)
		return
	}
	adminJSON(w, http.StatusOK, map[string]any{"released": key, "token": tok})
}

// operatorRelease is the fenced release of the admin API and the operator
// page (via says which), logged at Info when it frees the key.
func operatorRelease(ctx context.Context, s keystore.Store, log *slog.Logger, key string, token uint64, via string) error {
	if err := releaseKey(ctx, s, key, token); err != nil {
		return err
	}
	log.InfoContext(ctx, "admin: key released by an operator", "key", key, "token", token, "via", via)
	return nil
}

func (a *admin) forget(w http.ResponseWriter, r *http.Request) {
	fg, ok := keystore.As[keystore.Forgetter](a.s)
	if !ok {
		a.fail(w, r, fmt.Errorf("%T cannot forget keys: %w", a.s, errors.ErrUnsupported))
		return
	}
	key := r.PathValue("key")
	if err := fg.Forget(r.Context(), key); err != nil {
		a.fail(w, r, err)
		return
	}
	a.log.InfoContext(r.Context(), "admin: done key forgotten by an operator", "key", key)
	adminJSON(w, http.StatusOK, map[string]string{"forgot": key})
}
