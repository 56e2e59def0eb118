package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idem-go/idem/internal/option"
)

// ErrNoPrincipal is what a scope function returns (wrapped or not) for a
// request that carries no principal. Unless [WithAllowAnonymous] is set, such
// a keyed request is refused with 400 "no-principal" before any store I/O:
// anonymous clients must not share one scope, or one would be replayed
// another's stored response.
var ErrNoPrincipal = errors.New("idemhttp: the request carries no principal")

// authorizationScope is the default principal: a digest of the Authorization
// header, so stored keys never hold a credential.
func authorizationScope(r *http.Request) (string, error) {
	a := r.Header.Get("Authorization")
	if a == "" {
		return "", fmt.Errorf("%w (no Authorization header)", ErrNoPrincipal)
	}
	var in [256]byte // a credential of the usual size hashes from the stack
	sum := sha256.Sum256(append(in[:0], a...))
	var out [len("auth:") + 32]byte
	copy(out[:], "auth:")
	hex.Encode(out[len("auth:"):], sum[:16])
	return string(out[:]), nil
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// scopeOf returns the request's scope: the configured principal, or
// "anonymous" when it has none and anonymous requests are allowed.
func (c *config) scopeOf(r *http.Request) (string, error) {
	s, err := c.scope(r)
	if errors.Is(err, ErrNoPrincipal) && c.allowAnonymous {
		return "anonymous", nil
	}
	return s, err
}

// WithScopeHeader scopes keys by the value of header (a tenant or API key
// id). Requests without it get 400 "invalid-scope".
func WithScopeHeader(header string) Option {
	return func(c *config) error {
		h := http.CanonicalHeaderKey(strings.TrimSpace(header))
		if h == "" {
			return invalid("empty scope header")
		}
		c.scope = func(r *http.Request) (string, error) {
			v := r.Header.Values(h)
			if len(v) != 1 || v[0] == "" {
				return "", fmt.Errorf("exactly one %s header is required", h)
			}
			return "hdr:" + v[0], nil
		}
		return nil
	}
}

// WithScopeCookie scopes keys by a SHA-256 of the value of the cookie name
// (a session cookie), for APIs authenticated by cookies. A request without
// the cookie is scoped by its Authorization header, as by default; with
// neither it has no principal (see [ErrNoPrincipal]).
func WithScopeCookie(name string) Option {
	return func(c *config) error {
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, " \t;=,\"") {
			return invalid("scope cookie name %q", name)
		}
		c.scope = func(r *http.Request) (string, error) {
			if ck, err := r.Cookie(name); err == nil && ck.Value != "" {
				return "cookie:" + digest(name+"\x00"+ck.Value), nil
			}
			s, err := authorizationScope(r)
			if err != nil {
				return "", fmt.Errorf("%w (no %s cookie and no Authorization header)", ErrNoPrincipal, name)
			}
			return s, nil
		}
		return nil
	}
}

// WithScopeFunc scopes keys by f's result, typically the authenticated
// principal from the request's context. An error from f answers 400 without
// running the handler; an error wrapping [ErrNoPrincipal] is treated as an
// anonymous request (see [WithAllowAnonymous]).
func WithScopeFunc(f func(*http.Request) (string, error)) Option {
	return option.Check("idemhttp", f != nil, func(c *config) { c.scope = f }, "nil scope func")
}

// WithAllowAnonymous lets keyed requests without a principal (no
// Authorization header, or none of what the scope option looks for) share
// one "anonymous" scope, as idem did before. Only do this when every client
// is the same principal (one service calling another), or when the key
// itself is unguessable per client: anonymous clients that reuse a key see
// each other's responses.
func WithAllowAnonymous(allow bool) Option {
	return func(c *config) error { c.allowAnonymous = allow; return nil }
}
