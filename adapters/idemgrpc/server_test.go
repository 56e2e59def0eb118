package idemgrpc_test

import (
	"context"
	"crypto/tls"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/internal/testsupport/testca"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestConcurrentDuplicatesExecuteOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	svc := &payments{charge: func(_ context.Context, n int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		<-release
		return &testpb.ChargeReply{Id: "ch_" + strconv.FormatInt(n, 10), Amount: req.GetAmount()}, nil
	}}
	c := client(t, svc, nil, idemgrpc.WithWait(15*time.Second))
	ctx := keyed(ctxT(t), "Bearer alice", "k-concurrent")

	const n = 8
	var wg sync.WaitGroup
	replies := make([]*testpb.ChargeReply, n)
	replayed := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var hdr metadata.MD
			replies[i], errs[i] = c.Charge(ctx, &testpb.ChargeRequest{Account: "acct", Amount: 42}, grpc.Header(&hdr))
			replayed[i] = len(hdr.Get(idemgrpc.MetadataReplayed)) == 1
		})
	}
	time.Sleep(100 * time.Millisecond) // let the duplicates arrive while the first runs
	close(release)
	wg.Wait()
	nReplayed := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if !proto.Equal(replies[i], replies[0]) {
			t.Fatalf("call %d got %v, call 0 got %v", i, replies[i], replies[0])
		}
		if replayed[i] {
			nReplayed++
		}
	}
	if got := svc.calls.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	if nReplayed != n-1 {
		t.Fatalf("%d replays, want %d", nReplayed, n-1)
	}
}

func TestReplayIsIdentical(t *testing.T) {
	t.Parallel()
	svc := &payments{charge: func(ctx context.Context, n int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge-id", "ch_"+strconv.FormatInt(n, 10), "x-request-id", "r"+strconv.FormatInt(n, 10), "x-bin-bin", "\x00\x01"))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-cost", "7", "x-server-time", strconv.FormatInt(n, 10)))
		return &testpb.ChargeReply{Id: "ch_" + strconv.FormatInt(n, 10), Amount: req.GetAmount()}, nil
	}}
	c := client(t, svc, nil, idemgrpc.WithReplayMetadata("x-charge-id", "x-cost", "X-Bin-Bin"))
	ctx := keyed(ctxT(t), "Bearer alice", "k-replay")
	req := &testpb.ChargeRequest{Account: "acct", Amount: 42, Tags: map[string]string{"a": "1", "b": "2", "c": "3"}}

	call := func() (*testpb.ChargeReply, metadata.MD, metadata.MD) {
		var hdr, tr metadata.MD
		r, err := c.Charge(ctx, req, grpc.Header(&hdr), grpc.Trailer(&tr))
		if err != nil {
			t.Fatal(err)
		}
		return r, hdr, tr
	}
	r1, h1, t1 := call()
	r2, h2, t2 := call()
	if !proto.Equal(r1, r2) {
		t.Fatalf("replay %v, original %v", r2, r1)
	}
	if svc.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", svc.calls.Load())
	}
	if len(h1.Get(idemgrpc.MetadataReplayed)) != 0 || h2.Get(idemgrpc.MetadataReplayed)[0] != "true" {
		t.Fatalf("replayed marker: original %v, replay %v", h1, h2)
	}
	for _, k := range []string{"x-charge-id", "x-bin-bin"} {
		if got, want := h2.Get(k), h1.Get(k); len(got) != 1 || got[0] != want[0] {
			t.Fatalf("header %s: replay %q, original %q", k, got, want)
		}
	}
	if got := t2.Get("x-cost"); len(got) != 1 || got[0] != "7" {
		t.Fatalf("trailer x-cost replayed as %q", got)
	}
	if h2.Get("x-request-id") != nil || t2.Get("x-server-time") != nil {
		t.Fatalf("metadata off the allow list replayed: header %v trailer %v", h2, t2)
	}
	_ = t1
}

func TestReplayErrorStatusWithDetails(t *testing.T) {
	t.Parallel()
	svc := &payments{charge: func(context.Context, int64, *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		st, _ := status.New(codes.FailedPrecondition, "card declined").WithDetails(
			&errdetails.ErrorInfo{Reason: "CARD_DECLINED", Domain: "payments.example"},
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "card", Description: "expired"}}})
		return nil, st.Err()
	}}
	c := client(t, svc, nil)
	ctx := keyed(ctxT(t), "Bearer alice", "k-declined")
	req := &testpb.ChargeRequest{Account: "acct", Amount: 42}
	_, err1 := c.Charge(ctx, req)
	var hdr metadata.MD
	_, err2 := c.Charge(ctx, req, grpc.Header(&hdr))
	if !proto.Equal(status.Convert(err1).Proto(), status.Convert(err2).Proto()) {
		t.Fatalf("replayed status %v, original %v", status.Convert(err2).Proto(), status.Convert(err1).Proto())
	}
	if status.Code(err1) != codes.FailedPrecondition || len(status.Convert(err2).Details()) != 2 {
		t.Fatalf("status %v with %d details", err2, len(status.Convert(err2).Details()))
	}
	if svc.calls.Load() != 1 || len(hdr.Get(idemgrpc.MetadataReplayed)) != 1 {
		t.Fatalf("handler ran %d times; replay header %v", svc.calls.Load(), hdr)
	}
}

// TestStatusRules: codes that say "not executed" release the key (the retry
// runs the handler again); the others are stored and replayed.
func TestStatusRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		err   error
		panic bool
		runs  int64
	}{
		{"Unavailable", status.Error(codes.Unavailable, "down"), false, 2},
		{"ResourceExhausted", status.Error(codes.ResourceExhausted, "limited"), false, 2},
		{"Canceled", context.Canceled, false, 2},
		{"Internal", status.Error(codes.Internal, "bug"), false, 2},
		{"plain error is Unknown", errDown, false, 2},
		{"panic", nil, true, 2},
		{"NotFound is stored", status.Error(codes.NotFound, "no account"), false, 1},
		{"InvalidArgument is stored", status.Error(codes.InvalidArgument, "bad amount"), false, 1},
		{"OK is stored", nil, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := &payments{charge: func(context.Context, int64, *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
				if tc.panic {
					panic("boom")
				}
				if tc.err != nil {
					return nil, tc.err
				}
				return &testpb.ChargeReply{Id: "ch"}, nil
			}}
			srv := serve(t, svc, nil, nil)
			c := dial(t, srv.addr)
			ctx := keyed(ctxT(t), "Bearer alice", "k")
			_, err1 := c.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
			_, err2 := c.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
			if got := svc.calls.Load(); got != tc.runs {
				t.Fatalf("handler ran %d times, want %d (errors %v, %v)", got, tc.runs, err1, err2)
			}
			if status.Code(err1) != status.Code(err2) {
				t.Fatalf("first %v, second %v", err1, err2)
			}
		})
	}
}

func TestReleaseCodesOption(t *testing.T) {
	t.Parallel()
	svc := &payments{charge: func(context.Context, int64, *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		return nil, status.Error(codes.Internal, "stored, Stripe-style")
	}}
	c := client(t, svc, nil, idemgrpc.WithReleaseCodes(codes.Unavailable))
	ctx := keyed(ctxT(t), "Bearer alice", "k")
	_, _ = c.Charge(ctx, &testpb.ChargeRequest{})
	_, err := c.Charge(ctx, &testpb.ChargeRequest{})
	if status.Code(err) != codes.Internal || svc.calls.Load() != 1 {
		t.Fatalf("replay %v after %d runs, want the stored Internal after 1", err, svc.calls.Load())
	}
	if _, err := idemgrpc.New(newMem(t), idemgrpc.WithReleaseCodes(codes.OK)); err == nil {
		t.Fatal("WithReleaseCodes(OK) accepted")
	}
}

func TestKeyReusedForAnotherRequest(t *testing.T) {
	t.Parallel()
	svc := &payments{}
	c := client(t, svc, nil)
	ctx := keyed(ctxT(t), "Bearer alice", "k-reuse")
	tags := map[string]string{}
	for i := range 32 {
		tags["t"+strconv.Itoa(i)] = strconv.Itoa(i)
	}
	if _, err := c.Charge(ctx, &testpb.ChargeRequest{Account: "a", Amount: 10, Tags: tags}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Charge(ctx, &testpb.ChargeRequest{Account: "a", Amount: 11, Tags: tags})
	wantStatus(t, err, codes.FailedPrecondition, idemgrpc.ReasonKeyReused)
	// The same message built again (map insertion order differs) is the
	// same request: deterministic encoding gives it the same fingerprint.
	again := map[string]string{}
	for i := 31; i >= 0; i-- {
		again["t"+strconv.Itoa(i)] = strconv.Itoa(i)
	}
	r, err := c.Charge(ctx, &testpb.ChargeRequest{Account: "a", Amount: 10, Tags: again})
	if err != nil || r.GetAmount() != 10 || svc.calls.Load() != 1 {
		t.Fatalf("replay %v, %v after %d runs", r, err, svc.calls.Load())
	}
}

func TestKeyRules(t *testing.T) {
	t.Parallel()
	svc := &payments{}
	c := client(t, svc, nil, idemgrpc.WithRequired(true), idemgrpc.WithMethods(testpb.Payments_Charge_FullMethodName))
	ctx := ctxT(t)
	_, err := c.Charge(keyed(ctx, "Bearer a", ""), &testpb.ChargeRequest{})
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonMissingKey)
	for _, bad := range []string{strings.Repeat("k", 256), "has space", `"unterminated`, `""`} {
		_, err := c.Charge(keyed(ctx, "Bearer a", bad), &testpb.ChargeRequest{})
		wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonInvalidKey)
	}
	twice := metadata.AppendToOutgoingContext(keyed(ctx, "Bearer a", "k1"), idemgrpc.MetadataKey, "k2")
	_, err = c.Charge(twice, &testpb.ChargeRequest{})
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonInvalidKey)
	if svc.calls.Load() != 0 {
		t.Fatalf("handler ran %d times for refused calls", svc.calls.Load())
	}
	// The quoted Structured Field form is the same key as the bare one.
	if _, err := c.Charge(keyed(ctx, "Bearer a", "abc"), &testpb.ChargeRequest{}); err != nil {
		t.Fatal(err)
	}
	var hdr metadata.MD
	if _, err := c.Charge(keyed(ctx, "Bearer a", `"abc"`), &testpb.ChargeRequest{}, grpc.Header(&hdr)); err != nil || len(hdr.Get(idemgrpc.MetadataReplayed)) != 1 {
		t.Fatalf("quoted key: %v, header %v", err, hdr)
	}
}

func TestUnkeyedAndStreamingPassThrough(t *testing.T) {
	t.Parallel()
	svc := &payments{}
	c := client(t, svc, nil)
	ctx := ctxT(t)
	for range 2 {
		if _, err := c.Charge(ctx, &testpb.ChargeRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// A streaming call with a key is not deduplicated: no stream interceptor.
	for range 2 {
		s, err := c.Watch(keyed(ctx, "", "k-stream"), &testpb.ChargeRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := s.Recv(); err != nil {
				break
			}
		}
	}
	if svc.calls.Load() != 4 {
		t.Fatalf("handler ran %d times, want 4 (nothing deduplicated)", svc.calls.Load())
	}
}

func TestPrincipalIsolation(t *testing.T) {
	t.Parallel()
	svc := &payments{}
	c := client(t, svc, nil)
	ctx := ctxT(t)
	a1, err := c.Charge(keyed(ctx, "Bearer alice", "same"), &testpb.ChargeRequest{Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := c.Charge(keyed(ctx, "Bearer bob", "same"), &testpb.ChargeRequest{Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a1.GetId() == b1.GetId() || svc.calls.Load() != 2 {
		t.Fatalf("bob got %v, alice %v after %d runs: scopes shared", b1, a1, svc.calls.Load())
	}
	a2, _ := c.Charge(keyed(ctx, "Bearer alice", "same"), &testpb.ChargeRequest{Amount: 1})
	b2, _ := c.Charge(keyed(ctx, "Bearer bob", "same"), &testpb.ChargeRequest{Amount: 1})
	if !proto.Equal(a1, a2) || !proto.Equal(b1, b2) {
		t.Fatalf("replays crossed: alice %v/%v bob %v/%v", a1, a2, b1, b2)
	}
	_, err = c.Charge(keyed(ctx, "", "same"), &testpb.ChargeRequest{Amount: 1})
	wantStatus(t, err, codes.Unauthenticated, idemgrpc.ReasonNoPrincipal)

	anon := serve(t, &payments{}, nil, []idemgrpc.Option{idemgrpc.WithAllowAnonymous(true)})
	ca := dial(t, anon.addr)
	r1, err1 := ca.Charge(keyed(ctx, "", "same"), &testpb.ChargeRequest{})
	r2, err2 := ca.Charge(keyed(ctx, "", "same"), &testpb.ChargeRequest{})
	if err1 != nil || err2 != nil || !proto.Equal(r1, r2) {
		t.Fatalf("anonymous opt-in: %v %v, %v %v", r1, err1, r2, err2)
	}
}

func TestScopeFunc(t *testing.T) {
	t.Parallel()
	type tenantKey struct{}
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-tenant"); len(v) == 1 {
			ctx = context.WithValue(ctx, tenantKey{}, v[0])
		}
		return h(ctx, req)
	}
	scope := func(ctx context.Context, _ string) (string, error) {
		if t, ok := ctx.Value(tenantKey{}).(string); ok {
			return "tenant:" + t, nil
		}
		return "", idemgrpc.ErrNoPrincipal
	}
	svc := &payments{}
	srv := serve(t, svc, nil, []idemgrpc.Option{idemgrpc.WithScopeFunc(scope)}, auth)
	c := dial(t, srv.addr)
	ctx := ctxT(t)
	for _, tenant := range []string{"t1", "t2", "t1"} {
		if _, err := c.Charge(metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant, idemgrpc.MetadataKey, "k"), &testpb.ChargeRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if svc.calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (one per tenant)", svc.calls.Load())
	}
	_, err := c.Charge(keyed(ctx, "Bearer x", "k"), &testpb.ChargeRequest{})
	wantStatus(t, err, codes.Unauthenticated, idemgrpc.ReasonNoPrincipal)
}

// TestTLSPrincipal: with WithScopeTLS, two clients with verified
// certificates never share a key; a client without one has no principal.
func TestTLSPrincipal(t *testing.T) {
	t.Parallel()
	ca := testca.New(t)
	issue := func(l testca.Leaf) tls.Certificate { _, _, pair := ca.Issue(t, l); return pair }
	serverCreds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{issue(testca.Leaf{Serial: 2, CommonName: "server", Server: true})},
		ClientCAs:    ca.Pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	})
	svc := &payments{}
	srv := serveWith(t, svc, nil, []idemgrpc.Option{idemgrpc.WithScopeTLS()}, []grpc.ServerOption{grpc.Creds(serverCreds)})
	client := func(certs ...tls.Certificate) testpb.PaymentsClient {
		return dial(t, srv.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.Pool, Certificates: certs, MinVersion: tls.VersionTLS13,
		})))
	}
	alice := client(issue(testca.Leaf{Serial: 3, CommonName: "alice", URI: "spiffe://idem.test/alice", Client: true}))
	bob := client(issue(testca.Leaf{Serial: 4, CommonName: "bob", Client: true}))
	nobody := client()
	ctx := keyed(ctxT(t), "", "same")
	a1, err := alice.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := bob.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := alice.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	if err != nil || !proto.Equal(a1, a2) || proto.Equal(a1, b1) || svc.calls.Load() != 2 {
		t.Fatalf("alice %v/%v bob %v after %d executions (%v)", a1, a2, b1, svc.calls.Load(), err)
	}
	_, err = nobody.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	wantStatus(t, err, codes.Unauthenticated, idemgrpc.ReasonNoPrincipal)
}

func TestStoreOutage(t *testing.T) {
	t.Parallel()
	fs := &faultyStore{Store: newMem(t), reserveErr: errDown}
	svc := &payments{}
	c := client(t, svc, fs)
	_, err := c.Charge(keyed(ctxT(t), "Bearer a", "k"), &testpb.ChargeRequest{})
	wantStatus(t, err, codes.Unavailable, idemgrpc.ReasonStore)
	if svc.calls.Load() != 0 {
		t.Fatalf("handler ran %d times with the store down", svc.calls.Load())
	}
}

// TestCompleteFails: the effect happened and the response is delivered,
// but it could not be stored: the key stays in progress until its lease
// ends, so a retry is told to wait instead of executing again.
func TestCompleteFails(t *testing.T) {
	t.Parallel()
	fs := &faultyStore{Store: newMem(t), completeErr: errDown}
	svc := &payments{}
	c := client(t, svc, fs)
	ctx := keyed(ctxT(t), "Bearer a", "k")
	if _, err := c.Charge(ctx, &testpb.ChargeRequest{}); err != nil {
		t.Fatalf("the executed call's response was not delivered: %v", err)
	}
	var tr metadata.MD
	_, err := c.Charge(ctx, &testpb.ChargeRequest{}, grpc.Trailer(&tr))
	wantStatus(t, err, codes.Unavailable, idemgrpc.ReasonInProgress)
	if svc.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", svc.calls.Load())
	}
	ms2 := tr.Get(idemgrpc.MetadataPushback)
	if len(ms2) != 1 {
		t.Fatalf("no %s trailer: %v", idemgrpc.MetadataPushback, tr)
	}
	if n, err := strconv.Atoi(ms2[0]); err != nil || n <= 0 {
		t.Fatalf("pushback %q", ms2[0])
	}
	var ri *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			ri = r
		}
	}
	if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 {
		t.Fatalf("no RetryInfo detail in %v", status.Convert(err).Details())
	}
}
