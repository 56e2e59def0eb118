package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/idem-go/idem/internal/option"
)

// ErrNoPrincipal is what a scope function returns (wrapped or not) for a
// call that carries no principal. Unless [WithAllowAnonymous] is set, such a
// keyed call fails with Unauthenticated (reason [ReasonNoPrincipal]) before
// any store I/O: anonymous clients must not share one scope, or one would be
// replayed another's stored response.
var ErrNoPrincipal = errors.New("idemgrpc: the call carries no principal")

// authorizationScope is the default principal: a digest of the call's one
// authorization metadata entry, so stored keys never hold a credential.
func authorizationScope(ctx context.Context, _ string) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	switch {
	case len(v) == 0 || (len(v) == 1 && v[0] == ""):
		return "", fmt.Errorf("%w (no authorization metadata)", ErrNoPrincipal)
	case len(v) > 1:
		return "", fmt.Errorf("idemgrpc: %d authorization metadata entries, want one", len(v))
	}
	return "auth:" + digest(v[0]), nil
}

// tlsScope is the principal of a verified client certificate.
func tlsScope(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", fmt.Errorf("%w (no peer)", ErrNoPrincipal)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", fmt.Errorf("%w (the connection is not TLS)", ErrNoPrincipal)
	}
	if len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return "", fmt.Errorf("%w (no verified client certificate)", ErrNoPrincipal)
	}
	leaf := ti.State.VerifiedChains[0][0]
	if len(leaf.URIs) > 0 {
		return "tls:" + digest("uri\x00"+leaf.URIs[0].String()), nil
	}
	return "tls:" + digest("dn\x00"+leaf.Issuer.String()+"\x00"+leaf.Subject.String()), nil
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// scopeOf returns the call's scope: the configured principal, or
// "anonymous" when it has none and anonymous calls are allowed.
func (c *config) scopeOf(ctx context.Context, method string) (string, error) {
	s, err := c.scope(ctx, method)
	if errors.Is(err, ErrNoPrincipal) && c.allowAnonymous {
		return "anonymous", nil
	}
	return s, err
}

// WithScopeTLS scopes keys by the client's verified TLS certificate: its
// first URI SAN (a SPIFFE ID) if it has one, otherwise its issuer and
// subject, so that a renewed certificate keeps its scope. Only chains the
// server verified count (tls.Config.ClientAuth RequireAndVerifyClientCert or
// VerifyClientCertIfGiven); a call without one has no principal.
func WithScopeTLS() Option {
	return func(c *config) error { c.scope = tlsScope; return nil }
}

// WithScopeFunc scopes keys by f's result, typically the principal an
// authentication interceptor that runs before this one put in ctx. An error
// wrapping [ErrNoPrincipal] makes the call anonymous (see
// [WithAllowAnonymous]); any other error fails it with InvalidArgument
// (reason [ReasonInvalidScope]). Either way the handler does not run.
func WithScopeFunc(f func(ctx context.Context, fullMethod string) (string, error)) Option {
	return option.Check("idemgrpc", f != nil, func(c *config) { c.scope = f }, "nil scope func")
}

// WithAllowAnonymous lets keyed calls without a principal share one
// "anonymous" scope. Only do this when every client is the same principal
// (one service calling another over a trusted network), or when keys are
// unguessable per client: anonymous clients that reuse a key see each
// other's responses.
func WithAllowAnonymous(allow bool) Option {
	return func(c *config) error { c.allowAnonymous = allow; return nil }
}
