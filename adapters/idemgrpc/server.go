package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/ewma"
	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/internal/frontend/keyclaim"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Interceptor applies idempotency keys to unary gRPC calls. It is safe for
// concurrent use and starts no goroutines. Install [Interceptor.Unary] with
// grpc.UnaryInterceptor or grpc.ChainUnaryInterceptor, after the
// interceptors that authenticate the caller (a scope function reads what
// they found) and before those that must run once per execution.
type Interceptor struct {
	store   keystore.Store
	cfg     config
	took    ewma.Duration
	aborted handlerctx.Abort // ends the handlers' contexts on Abort
}

// New returns an Interceptor that keeps keys and responses in s. Options
// are validated here; a bad one returns an error wrapping
// idem.ErrInvalidOption. It does no I/O: call keystore.Check at start-up to
// learn that s is unreachable or not migrated (a SQL store whose Migrate
// was never called) before the first call does; while it is not migrated,
// keyed calls fail with FailedPrecondition (reason [ReasonNotMigrated]).
func New(s keystore.Store, opts ...Option) (*Interceptor, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	cfg := defaultConfig()
	if err := option.Apply("idemgrpc", &cfg, opts); err != nil {
		return nil, err
	}
	ic := &Interceptor{store: s, cfg: cfg}
	return ic, nil
}

// Unary is the grpc.UnaryServerInterceptor. For a call of a configured
// method that carries a key, it reserves (principal, key) in the store,
// then runs the handler and stores its response, or replays a stored one
// without running the handler. The statuses it returns itself, and what it
// does with each of the handler's, are in the package documentation.
//
// Store calls run under a context that the client's cancellation does not
// end (bounded by the store timeout): a reservation is never left half
// made, and an effect that happened is recorded even if the client has
// gone. If the client is gone once the key is reserved, the handler does
// not run and the key is released. Once the handler runs, the client's
// cancellation or deadline does not end its context either: the retry is
// expected, and replays the stored response (see [WithHandlerTimeout],
// [WithClientCancel], [Interceptor.Abort]). The lease is renewed while the
// handler runs when the store can, and the handler's context ends if the
// lease is lost; with a store that cannot renew, it ends when the lease
// does.
//
// If the process dies after the reservation and before the response is
// stored, the key stays in progress until its lease ends (retries get
// Unavailable, reason IN_PROGRESS), and then a retry executes again: pass
// the key to downstream systems so that they absorb the repeat.
func (i *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, o, err := i.serve(ctx, req, info, handler)
	if i.cfg.hooks != nil {
		i.cfg.hooks.Call(o, time.Since(start))
	}
	return resp, err
}

// serve is Unary, and says what it did.
func (i *Interceptor) serve(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, Outcome, error) {
	if i.cfg.methods != nil && !i.cfg.methods[info.FullMethod] {
		resp, err := handler(ctx, req)
		return resp, idemhttp.OutcomePassThrough, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	key, err := KeyFromMetadata(md)
	if errors.Is(err, idem.ErrMissingKey) && !i.cfg.required {
		resp, err := handler(ctx, req)
		return resp, idemhttp.OutcomePassThrough, err
	}
	if i.cfg.tracer == nil {
		return i.keyed(ctx, req, info, handler, key, err)
	}
	ctx, span := i.cfg.tracer.Start(ctx, idem.OpGRPCCall)
	span.Attr(idem.AttrRoute, info.FullMethod)
	span.Link(mdCarrier(md))
	if err == nil {
		span.Key(key)
	}
	resp, o, err := i.keyed(ctx, req, info, handler, key, err)
	var failed error
	switch o {
	case idemhttp.OutcomeStoreError:
		failed = errStoreFailed
	case idemhttp.OutcomeLeaseLost:
		failed = keystore.ErrLeaseLost
	}
	span.End(string(o), failed)
	return resp, o, err
}

// errStoreFailed marks the span of a call answered Unavailable (or left
// unrecorded) because the key store failed; the store's own span, if it
// is traced, holds the store's error.
var errStoreFailed = errors.New("idemgrpc: the key store failed")

// mdCarrier reads a call's metadata for idem.Span.Link: the client's trace
// context (traceparent) travels in it. Metadata keys are lower case.
type mdCarrier metadata.MD

// Get returns the first value of key name, or "".
func (m mdCarrier) Get(name string) string {
	if v := metadata.MD(m).Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Keys lists the metadata keys.
func (m mdCarrier) Keys() []string { return slices.Collect(maps.Keys(m)) }

// keyed is serve for a call that carries a key, or lacks a required one
// (keyErr).
func (i *Interceptor) keyed(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, key string, keyErr error) (any, Outcome, error) {
	switch err := keyErr; {
	case errors.Is(err, idem.ErrMissingKey):
		return nil, idemhttp.OutcomeBadRequest, failure(codes.InvalidArgument, ReasonMissingKey, info.FullMethod+" requires an "+MetadataKey+" metadata entry")
	case err != nil:
		return nil, idemhttp.OutcomeBadRequest, failure(codes.InvalidArgument, ReasonInvalidKey, err.Error())
	}
	scope, err := i.cfg.scopeOf(ctx, info.FullMethod)
	switch {
	case errors.Is(err, ErrNoPrincipal):
		return nil, idemhttp.OutcomeBadRequest, failure(codes.Unauthenticated, ReasonNoPrincipal, err.Error()+"; keyed calls must identify their principal so that no client is replayed another's response")
	case err != nil:
		return nil, idemhttp.OutcomeBadRequest, failure(codes.InvalidArgument, ReasonInvalidScope, err.Error())
	}
	fp, err := Fingerprint(info.FullMethod, req)
	if err != nil {
		return nil, idemhttp.OutcomeBadRequest, failure(codes.Internal, ReasonUnfingerprintable, err.Error())
	}
	claim, err := keystore.Await(ctx, i.store, storeKey(scope, key), fp, i.cfg.lease, i.wait())
	switch {
	case errors.Is(err, idem.ErrFingerprintMismatch):
		return nil, idemhttp.OutcomeMismatch, failure(codes.FailedPrecondition, ReasonKeyReused, "the key was first used with another method or request message; use a new key for a new request")
	case errors.Is(err, keystore.ErrInProgress):
		d := i.pushback(claim)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataPushback, fmt.Sprint(d.Milliseconds())))
		return nil, idemhttp.OutcomeInProgress, failure(codes.Unavailable, ReasonInProgress, "a call with this key is being executed; retry after it completes", retryInfo(d))
	case err != nil && errors.Is(err, ctx.Err()):
		// The client left before or while the key was reserved: nobody
		// would get the answer, so do not act (Await gave back a key it
		// took); the retry executes.
		i.cfg.logger.DebugContext(ctx, "idemgrpc: client gone before the handler ran", "method", info.FullMethod, "err", err)
		return nil, idemhttp.OutcomeClientGone, statusOf(ctx.Err()).Err()
	case errors.Is(err, keystore.ErrNotMigrated):
		// Not transient: Unavailable would have clients retry forever.
		i.cfg.logger.ErrorContext(ctx, "idemgrpc: the key store is not migrated; call its Migrate (or apply its SchemaSQL) before serving", "method", info.FullMethod, "err", err)
		return nil, idemhttp.OutcomeStoreError, failure(codes.FailedPrecondition, ReasonNotMigrated, "the call was not executed: the idempotency key store is not migrated (its table does not exist); the operator must call the store's Migrate, or apply its SchemaSQL, and restart")
	case err != nil:
		i.cfg.logger.ErrorContext(ctx, "idemgrpc: store unavailable", "method", info.FullMethod, "err", err)
		return nil, idemhttp.OutcomeStoreError, failure(codes.Unavailable, ReasonStore, "the idempotency store is unavailable; the call was not executed, retry with the same key")
	case claim.State == keystore.Done:
		return i.replay(ctx, claim)
	}
	return i.execute(ctx, req, handler, key, claim)
}

// Fingerprint returns the SHA-256 digest stored beside a key to detect a key
// reused for another call: the full method name and the request's
// deterministic protobuf encoding, each length-prefixed. Two requests that
// are equal as messages (map entries in any order) have one fingerprint.
// A request that is not a proto.Message is an error.
func Fingerprint(fullMethod string, req any) ([]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("idemgrpc: request %T is not a proto.Message", req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("idemgrpc: encoding the request: %w", err)
	}
	h := sha256.New()
	h.Write(fmt.Appendf(nil, "%d:%s", len(fullMethod), fullMethod))
	h.Write(b)
	return h.Sum(nil), nil
}

// storeKey derives the key in the store from the principal's scope and the
// client's key: a fixed-length digest, so that no scope can name another's
// key.
func storeKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "grpc:" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// wait is how a call waits for a key in progress: WithWait's bound, polled
// by keystore.Await from 10ms up to 250ms with jitter, each Reserve bounded
// by the store timeout and not ended by the client's cancellation.
func (i *Interceptor) wait() keystore.Wait {
	return keyclaim.Wait(i.cfg.storeTimeout, i.cfg.wait)
}

func (i *Interceptor) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), i.cfg.storeTimeout)
}

// release gives the key back so that a retry executes.
func (i *Interceptor) release(ctx context.Context, c keystore.Claim, why string) {
	sctx, cancel := i.storeCtx(ctx)
	defer cancel()
	keyclaim.Release(sctx, i.store, c, i.cfg.logger, "idemgrpc", why)
}
