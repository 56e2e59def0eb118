package idemgrpc_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/httptestx"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// outcomes records what the Hooks saw.
type outcomes struct {
	httptestx.Outcomes[idemgrpc.Outcome]
}

func (o *outcomes) Call(out idemgrpc.Outcome, d time.Duration) {
	if d <= 0 {
		out += " (no duration)"
	}
	o.Add(out)
}

// answering is a store whose Reserve answers c (and blocks until its ctx
// ends when block is set).
type answering struct {
	keystore.Store
	c     keystore.Claim
	block bool
}

func (s answering) Reserve(ctx context.Context, key string, _ []byte, _ time.Duration) (keystore.Claim, error) {
	if s.block {
		<-ctx.Done()
		return keystore.Claim{}, ctx.Err()
	}
	s.c.Key = key
	return s.c, nil
}

const charge = testpb.Payments_Charge_FullMethodName

// call runs one unary call of method through ic, as the server would, with
// the metadata kv.
func call(ctx context.Context, ic *idemgrpc.Interceptor, method string, req any, h grpc.UnaryHandler, kv ...string) (any, error) {
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	return ic.Unary(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, h)
}

// TestOutcomes: each way the interceptor answers a call is reported to
// Hooks once, with its own outcome and the status it returns.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, any) (any, error) { return &testpb.ChargeReply{Id: "ch"}, nil }
	claimed := func(ctx context.Context, _ any) (any, error) {
		if c, found := idemgrpc.ClaimFrom(ctx); !found || c.State != keystore.Acquired || c.Token == 0 {
			t.Errorf("ClaimFrom in the handler: %+v %v", c, found)
		}
		return &testpb.ChargeReply{Id: "ch"}, nil
	}
	unavailable := func(context.Context, any) (any, error) { return nil, status.Error(codes.Unavailable, "busy") }
	key := []string{"authorization", "Bearer alice", idemgrpc.MetadataKey, "k"}
	req := &testpb.ChargeRequest{Amount: 1}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		opts     []idemgrpc.Option
		store    func(t *testing.T) keystore.Store // nil: a memstore
		ctx      context.Context                   // nil: Background
		method   string                            // "": Charge
		req      any                               // nil: req
		handler  grpc.UnaryHandler                 // nil: ok
		md       []string                          // nil: key
		pause    time.Duration                     // between the calls
		want     []idemgrpc.Outcome                // one call per outcome, same key
		code     codes.Code                        // of the last call
		reason   string                            // of the last call
		maxDelay time.Duration                     // 0: no bound checked
	}{
		{name: "method not configured", opts: []idemgrpc.Option{idemgrpc.WithMethods("/other.Service/Method")}, want: []idemgrpc.Outcome{idemhttp.OutcomePassThrough}},
		{name: "no key", md: []string{"authorization", "Bearer alice"}, want: []idemgrpc.Outcome{idemhttp.OutcomePassThrough}},
		{name: "no key, required", opts: []idemgrpc.Option{idemgrpc.WithRequired(true)}, md: []string{"authorization", "Bearer alice"}, want: []idemgrpc.Outcome{idemhttp.OutcomeBadRequest}, code: codes.InvalidArgument, reason: idemgrpc.ReasonMissingKey},
		{name: "bad key", md: []string{"authorization", "Bearer alice", idemgrpc.MetadataKey, "a b"}, want: []idemgrpc.Outcome{idemhttp.OutcomeBadRequest}, code: codes.InvalidArgument, reason: idemgrpc.ReasonInvalidKey},
		{name: "scope fails", opts: []idemgrpc.Option{idemgrpc.WithScopeFunc(func(context.Context, string) (string, error) { return "", context.DeadlineExceeded })}, want: []idemgrpc.Outcome{idemhttp.OutcomeBadRequest}, code: codes.InvalidArgument, reason: idemgrpc.ReasonInvalidScope},
		{name: "request not protobuf", req: "not a message", want: []idemgrpc.Outcome{idemhttp.OutcomeBadRequest}, code: codes.Internal, reason: idemgrpc.ReasonUnfingerprintable},
		{name: "executed, replayed", handler: claimed, want: []idemgrpc.Outcome{idemhttp.OutcomeExecuted, idemhttp.OutcomeReplayed}},
		{name: "ttl ends", opts: []idemgrpc.Option{idemgrpc.WithTTL(20 * time.Millisecond)}, pause: 100 * time.Millisecond, want: []idemgrpc.Outcome{idemhttp.OutcomeExecuted, idemhttp.OutcomeExecuted}},
		{name: "released", handler: unavailable, want: []idemgrpc.Outcome{idemhttp.OutcomeReleased, idemhttp.OutcomeReleased}, code: codes.Unavailable},
		{name: "response too large", opts: []idemgrpc.Option{idemgrpc.WithMaxResponseSize(1)}, want: []idemgrpc.Outcome{idemhttp.OutcomeNotStored, idemhttp.OutcomeReplayed}, code: codes.FailedPrecondition, reason: idemgrpc.ReasonNotStored},
		{name: "in progress", store: func(*testing.T) keystore.Store {
			return answering{c: keystore.Claim{State: keystore.InProgress, Expires: time.Now().Add(time.Minute)}}
		}, want: []idemgrpc.Outcome{idemhttp.OutcomeInProgress}, code: codes.Unavailable, reason: idemgrpc.ReasonInProgress},
		{name: "stored record corrupt", store: func(*testing.T) keystore.Store {
			return answering{c: keystore.Claim{State: keystore.Done, Result: []byte("garbage")}}
		}, want: []idemgrpc.Outcome{idemhttp.OutcomeStoreError}, code: codes.Internal, reason: idemgrpc.ReasonCorrupt},
		{name: "store down", store: func(t *testing.T) keystore.Store { return &faultyStore{Store: newMem(t), reserveErr: errDown} }, want: []idemgrpc.Outcome{idemhttp.OutcomeStoreError}, code: codes.Unavailable, reason: idemgrpc.ReasonStore},
		{name: "store timeout", opts: []idemgrpc.Option{idemgrpc.WithStoreTimeout(20 * time.Millisecond)}, store: func(*testing.T) keystore.Store { return answering{block: true} }, want: []idemgrpc.Outcome{idemhttp.OutcomeStoreError}, code: codes.Unavailable, reason: idemgrpc.ReasonStore, maxDelay: 5 * time.Second},
		{name: "complete fails", store: func(t *testing.T) keystore.Store { return &faultyStore{Store: newMem(t), completeErr: errDown} }, want: []idemgrpc.Outcome{idemhttp.OutcomeStoreError}},
		{name: "lease lost", store: func(t *testing.T) keystore.Store {
			return &faultyStore{Store: newMem(t), completeErr: keystore.ErrLeaseLost}
		}, want: []idemgrpc.Outcome{idemhttp.OutcomeLeaseLost}},
		{name: "client gone", ctx: gone, want: []idemgrpc.Outcome{idemhttp.OutcomeClientGone}, code: codes.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := keystore.Store(nil)
			if tc.store != nil {
				store = tc.store(t)
			} else {
				store = newMem(t)
			}
			var seen outcomes
			ic, err := idemgrpc.New(store, append(tc.opts, idemgrpc.WithHooks(&seen))...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, method, r, h, md := cmp(tc.ctx, context.Background()), cmp(tc.method, charge), cmp(tc.req, any(req)), tc.handler, tc.md
			if h == nil {
				h = ok
			}
			if md == nil {
				md = key
			}
			for n := range tc.want {
				if n > 0 {
					time.Sleep(tc.pause)
				}
				start := time.Now()
				_, err = call(ctx, ic, method, r, h, md...)
				if tc.maxDelay > 0 && time.Since(start) > tc.maxDelay {
					t.Fatalf("call %d took %v", n, time.Since(start))
				}
			}
			if !slices.Equal(seen.All(), tc.want) {
				t.Fatalf("outcomes %v, want %v", seen.All(), tc.want)
			}
			wantStatus(t, err, tc.code, tc.reason)
		})
	}
}

// cmp returns v, or def when v is the zero value.
func cmp[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// TestOptionsRefused: every option refuses a value it cannot honour, with
// an error wrapping idem.ErrInvalidOption, and New refuses a nil store.
func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, o := range []idemgrpc.Option{
		idemgrpc.WithMethods(), idemgrpc.WithMethods("Charge"), idemgrpc.WithTTL(0), idemgrpc.WithLease(-1),
		idemgrpc.WithWait(-1), idemgrpc.WithStoreTimeout(0), idemgrpc.WithReleaseCodes(codes.OK),
		idemgrpc.WithReplayMetadata("grpc-status"), idemgrpc.WithMaxResponseSize(0), idemgrpc.WithLogger(nil), idemgrpc.WithTracer(nil),
		idemgrpc.WithHooks(nil), idemgrpc.WithScopeFunc(nil), nil,
	} {
		if _, err := idemgrpc.New(newMem(t), o); !isInvalidOption(err) {
			t.Errorf("option accepted or wrong error: %v", err)
		}
	}
	if _, err := idemgrpc.New(nil); !isInvalidOption(err) {
		t.Errorf("nil store: %v", err)
	}
}

func isInvalidOption(err error) bool { return errors.Is(err, idem.ErrInvalidOption) }

// TestLoggerSeesStoreErrors: WithLogger receives what the interceptor
// cannot say to the client.
func TestLoggerSeesStoreErrors(t *testing.T) {
	t.Parallel()
	var logs testenv.SyncBuffer
	l := slog.New(slog.NewTextHandler(&logs, nil))
	ic, err := idemgrpc.New(&faultyStore{Store: newMem(t), completeErr: errDown}, idemgrpc.WithLogger(l))
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, any) (any, error) { return &testpb.ChargeReply{}, nil }
	if _, err := call(context.Background(), ic, charge, &testpb.ChargeRequest{}, h, "authorization", "a", idemgrpc.MetadataKey, "k"); err != nil {
		t.Fatal(err)
	}
	if log := logs.String(); !strings.Contains(log, "storing the response failed") || !strings.Contains(log, errDown.Error()) {
		t.Fatalf("log: %q", log)
	}
}

// TestFingerprint: the method and the message's content decide the
// fingerprint, not the order of its map entries.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(method string, req any) string {
		b, err := idemgrpc.Fingerprint(method, req)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a := &testpb.ChargeRequest{Amount: 1, Tags: map[string]string{"a": "1", "b": "2", "c": "3"}}
	b := &testpb.ChargeRequest{Amount: 1, Tags: map[string]string{"c": "3", "b": "2", "a": "1"}}
	if fp(charge, a) != fp(charge, b) {
		t.Error("equal messages, different fingerprints")
	}
	if fp(charge, a) == fp("/idem.testpb.Payments/Refund", a) || fp(charge, a) == fp(charge, &testpb.ChargeRequest{Amount: 2}) {
		t.Error("another method or message, same fingerprint")
	}
	if _, err := idemgrpc.Fingerprint(charge, 42); err == nil {
		t.Error("a request that is not a proto.Message has a fingerprint")
	}
}

// TestDefaultReleaseCodes: the default list releases what a handler
// answers when it did not act, never OK, and is the caller's to extend.
func TestDefaultReleaseCodes(t *testing.T) {
	t.Parallel()
	cs := idemgrpc.DefaultReleaseCodes()
	if !slices.Contains(cs, codes.Unavailable) || slices.Contains(cs, codes.OK) || slices.Contains(cs, codes.InvalidArgument) {
		t.Fatalf("DefaultReleaseCodes() = %v", cs)
	}
	cs[0] = codes.OK
	if slices.Contains(idemgrpc.DefaultReleaseCodes(), codes.OK) {
		t.Fatal("DefaultReleaseCodes shares its slice with callers")
	}
}
