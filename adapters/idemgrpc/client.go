package idemgrpc

import (
	"context"
	"crypto/rand"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type keyCtx struct{}

// WithKey returns a context whose unary calls, made through a connection
// with [UnaryClientInterceptor], carry key as their idempotency key. Use it
// when the key comes from the business operation ([idem.DeriveKey], an
// order id) so that a retry of the whole operation, even from another
// process, reuses it. key must satisfy [KeyFromMetadata] as a bare token.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// UnaryClientInterceptor returns a grpc.UnaryClientInterceptor that gives
// every unary call one idempotency key: the caller's, when the outgoing
// metadata already has an idempotency-key entry or ctx carries one from
// [WithKey], otherwise a new random one (a UUID v4). Install it with
// grpc.WithUnaryInterceptor or grpc.WithChainUnaryInterceptor.
//
// grpc-go runs unary client interceptors once per logical call, outside its
// retry loop: transparent retries and the attempts of a service config
// retry or hedging policy resend the same metadata, so they all carry the
// one key and the server executes the call at most once. A retry that the
// application makes by calling again gets a new key unless it passes the
// same one with WithKey. A key given with WithKey that is not a valid bare
// token fails the call with InvalidArgument before anything is sent.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(MetadataKey)) > 0 {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		key, given := ctx.Value(keyCtx{}).(string)
		if !given {
			key = newKey()
		} else if got, err := KeyFromMetadata(metadata.Pairs(MetadataKey, key)); err != nil || got != key {
			return status.Errorf(codes.InvalidArgument, "idemgrpc: WithKey(%q) is not a valid bare key: %v", key, err)
		}
		return invoker(metadata.AppendToOutgoingContext(ctx, MetadataKey, key), method, req, reply, cc, opts...)
	}
}

// newKey returns a random UUID v4.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
