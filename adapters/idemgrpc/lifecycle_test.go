package idemgrpc_test

// The shared test server and client helpers, then the tests of a call's
// life: deadlines, clients that leave, leases and their renewal, and a
// client's retries.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/internal/testsupport/leasetry"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/storetest"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// payments is the service under test; charge, when set, replaces the
// default behaviour (a reply numbered by the execution count).
type payments struct {
	testpb.UnimplementedPaymentsServer
	calls  atomic.Int64
	charge func(ctx context.Context, n int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error)
}

func (p *payments) Charge(ctx context.Context, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
	n := p.calls.Add(1)
	if p.charge != nil {
		return p.charge(ctx, n, req)
	}
	return &testpb.ChargeReply{Id: fmt.Sprintf("ch_%d", n), Amount: req.GetAmount()}, nil
}

func (p *payments) Watch(req *testpb.ChargeRequest, s grpc.ServerStreamingServer[testpb.ChargeReply]) error {
	n := p.calls.Add(1)
	for i := range 2 {
		if err := s.Send(&testpb.ChargeReply{Id: fmt.Sprintf("ev_%d_%d", n, i)}); err != nil {
			return err
		}
	}
	return nil
}

// recoverPanics stands for the recovery interceptor a real server installs
// outside idemgrpc: grpc-go itself does not recover a handler's panic.
func recoverPanics(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(ctx, req)
}

type server struct {
	addr  string
	store keystore.Store
}

// serve starts a gRPC server on loopback with idemgrpc over store (a fresh
// memstore when nil), extra interceptors running before it.
func serve(t *testing.T, svc *payments, store keystore.Store, opts []idemgrpc.Option, before ...grpc.UnaryServerInterceptor) server {
	return serveWith(t, svc, store, opts, nil, before...)
}

func serveWith(t *testing.T, svc *payments, store keystore.Store, opts []idemgrpc.Option, sopts []grpc.ServerOption, before ...grpc.UnaryServerInterceptor) server {
	t.Helper()
	if store == nil {
		ms, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ms.Close() })
		store = ms
	}
	ic, err := idemgrpc.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	chain := append([]grpc.UnaryServerInterceptor{recoverPanics}, before...)
	srv := grpc.NewServer(append(sopts, grpc.ChainUnaryInterceptor(append(chain, ic.Unary)...))...)
	testpb.RegisterPaymentsServer(srv, svc)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	return server{addr: lis.Addr().String(), store: store}
}

// client serves svc over store with opts (see serve) and returns a client
// of that server.
func client(t *testing.T, svc *payments, store keystore.Store, opts ...idemgrpc.Option) testpb.PaymentsClient {
	t.Helper()
	return dial(t, serve(t, svc, store, opts).addr)
}

// dial connects to addr; the connection is closed when the test ends.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) testpb.PaymentsClient {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testpb.NewPaymentsClient(cc)
}

// keyed returns a context whose calls carry the principal auth and key.
func keyed(ctx context.Context, auth, key string) context.Context {
	kv := []string{}
	if auth != "" {
		kv = append(kv, "authorization", auth)
	}
	if key != "" {
		kv = append(kv, idemgrpc.MetadataKey, key)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// reasonOf returns the ErrorInfo reason of an idemgrpc status.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == idemgrpc.ErrorDomain {
			return ei.GetReason()
		}
	}
	return ""
}

func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("status = %v (%v), want %v", got, err, code)
	}
	if reason != "" && reasonOf(err) != reason {
		t.Fatalf("reason = %q (%v), want %q", reasonOf(err), err, reason)
	}
}

// faultyStore fails the operations whose error is set.
type faultyStore struct {
	keystore.Store
	reserveErr, completeErr error
	completes               atomic.Int64
	cancelledCompletes      atomic.Int64
}

var errDown = errors.New("store down")

func (s *faultyStore) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if s.reserveErr != nil {
		return keystore.Claim{}, s.reserveErr
	}
	return s.Store.Reserve(ctx, key, fp, lease)
}

func (s *faultyStore) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	s.completes.Add(1)
	if ctx.Err() != nil {
		s.cancelledCompletes.Add(1)
	}
	if s.completeErr != nil {
		return s.completeErr
	}
	return s.Store.Complete(ctx, c, result, ttl)
}

func newMem(t *testing.T) *memstore.Store {
	t.Helper()
	ms, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	return ms
}

// TestDeadlineExpiresWhileHandlerRuns: the client gives up (its deadline
// passes) after the server started executing; the effect completes, the
// response is stored under a context the client's cancellation did not
// end, and the client's retry gets the replay instead of a second charge.
//
// The case needs the call to reach the handler before its 50 ms deadline,
// which a loaded machine does not promise (the first call also dials): an
// attempt whose call never reached the handler is tried again with a new
// key and twice the deadline. Each attempt's handler is told apart by its
// key, so that one arriving late cannot be counted for another.
func TestDeadlineExpiresWhileHandlerRuns(t *testing.T) {
	t.Parallel()
	fs := &faultyStore{Store: newMem(t)}
	// One attempt's handler: started once it runs, blocked until the
	// client has seen its deadline (gaveUp: the server's copy of the
	// deadline fires a little earlier than the client's, and a reply sent
	// in between would reach the client in time), done once it returned.
	type attempt struct {
		started, gaveUp, done chan struct{}
		calls                 atomic.Int64
		ctxEnded              atomic.Bool
	}
	var attempts sync.Map // key → *attempt
	svc := &payments{charge: func(ctx context.Context, _ int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		key, _ := idemgrpc.KeyFrom(ctx)
		v, _ := attempts.Load(key)
		a := v.(*attempt)
		if a.calls.Add(1) == 1 {
			close(a.started)
			defer close(a.done)
		}
		<-a.gaveUp                         // the client's deadline has passed; the effect goes on
		a.ctxEnded.Store(ctx.Err() != nil) // the handler's context outlives the client's deadline
		return &testpb.ChargeReply{Id: "ch_slow_" + key, Amount: req.GetAmount()}, nil
	}}
	srv := serve(t, svc, fs, []idemgrpc.Option{idemgrpc.WithWait(10 * time.Second)})
	c := dial(t, srv.addr)
	for i, d := 0, 50*time.Millisecond; ; i, d = i+1, 2*d {
		if d > 30*time.Second {
			t.Fatalf("no call reached its handler before its deadline in %d attempts", i)
		}
		key := fmt.Sprintf("k-deadline-%d", i)
		a := &attempt{started: make(chan struct{}), gaveUp: make(chan struct{}), done: make(chan struct{})}
		attempts.Store(key, a)
		base := keyed(ctxT(t), "Bearer alice", key)
		short, cancel := context.WithTimeout(base, d)
		_, err := c.Charge(short, &testpb.ChargeRequest{Amount: 3})
		cancel()
		close(a.gaveUp)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("first call: %v, want DeadlineExceeded", err)
		}
		select {
		case <-a.started:
		case <-time.After(2 * time.Second): // only decides to try again; a late handler runs under its own key
			t.Logf("attempt %d: the call did not reach its handler within its %v deadline (a loaded machine); again with twice the deadline", i, d)
			continue
		}
		<-a.done
		var hdr metadata.MD
		r, err := c.Charge(base, &testpb.ChargeRequest{Amount: 3}, grpc.Header(&hdr))
		if err != nil || r.GetId() != "ch_slow_"+key || len(hdr.Get(idemgrpc.MetadataReplayed)) != 1 {
			t.Fatalf("retry: %v %v (header %v), want the replay of ch_slow_%s", r, err, hdr, key)
		}
		if a.calls.Load() != 1 || fs.cancelledCompletes.Load() != 0 {
			t.Fatalf("%d executions of %s, %d completes under a cancelled ctx", a.calls.Load(), key, fs.cancelledCompletes.Load())
		}
		if a.ctxEnded.Load() {
			t.Fatal("the handler's context ended with the client's deadline")
		}
		return
	}
}

// gatedStore blocks its first Reserve until open is closed.
type gatedStore struct {
	keystore.Store
	open     chan struct{}
	reserves atomic.Int64
}

func (s *gatedStore) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	if s.reserves.Add(1) == 1 {
		<-s.open
	}
	return s.Store.Reserve(ctx, key, fp, lease)
}

// TestClientGoneAfterReservation: the client cancels while the key is being
// reserved; the reservation completes (it is not cut half-way), the handler
// does not run, and the key is released, so the next call executes.
func TestClientGoneAfterReservation(t *testing.T) {
	t.Parallel()
	gs := &gatedStore{Store: newMem(t), open: make(chan struct{})}
	serverCtx := make(chan context.Context, 1)
	finished := make(chan error, 1)
	watch := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if gs.reserves.Load() == 0 {
			serverCtx <- ctx
			resp, err := h(ctx, req)
			finished <- err
			return resp, err
		}
		return h(ctx, req)
	}
	svc := &payments{}
	srv := serve(t, svc, gs, nil, watch)
	c := dial(t, srv.addr)
	base := keyed(ctxT(t), "Bearer alice", "k-gone")
	ctx, cancel := context.WithCancel(base)
	errc := make(chan error, 1)
	go func() { _, err := c.Charge(ctx, &testpb.ChargeRequest{}); errc <- err }()
	sctx := <-serverCtx
	cancel()
	<-sctx.Done() // the server saw the client go
	close(gs.open)
	if err := <-finished; status.Code(err) != codes.Canceled {
		t.Fatalf("server answered %v, want Canceled", err)
	}
	<-errc
	if svc.calls.Load() != 0 {
		t.Fatalf("handler ran for a client that was gone")
	}
	var hdr metadata.MD
	if _, err := c.Charge(base, &testpb.ChargeRequest{}, grpc.Header(&hdr)); err != nil || len(hdr.Get(idemgrpc.MetadataReplayed)) != 0 {
		t.Fatalf("next call: %v (header %v), want a fresh execution", err, hdr)
	}
	if svc.calls.Load() != 1 {
		t.Fatalf("%d executions, want 1", svc.calls.Load())
	}
}

// TestEffectLongerThanLease is the behaviour with a store that cannot renew
// leases: an effect that outlives its lease can run twice. What idemgrpc
// does: the handler's context ends with the lease (a handler that honours
// it stops), and the first execution's late result is not stored over the
// second's (ErrLeaseLost).
func TestEffectLongerThanLease(t *testing.T) {
	t.Parallel()
	leaseEnded, finish := make(chan struct{}), make(chan struct{})
	var sawDeadline atomic.Bool
	svc := &payments{charge: func(ctx context.Context, n int64, _ *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		if n == 1 {
			dl, ok := ctx.Deadline()
			sawDeadline.Store(ok && time.Until(dl) <= 200*time.Millisecond)
			<-ctx.Done() // the lease ended
			close(leaseEnded)
			<-finish // a handler that ignores its context and carries on
			return &testpb.ChargeReply{Id: "ch_late"}, nil
		}
		return &testpb.ChargeReply{Id: "ch_second"}, nil
	}}
	srv := serve(t, svc, noExtend{newMem(t)}, []idemgrpc.Option{idemgrpc.WithLease(200 * time.Millisecond)})
	c := dial(t, srv.addr)
	ctx := keyed(ctxT(t), "Bearer alice", "k-lease")
	first := make(chan *testpb.ChargeReply, 1)
	go func() { r, _ := c.Charge(ctx, &testpb.ChargeRequest{}); first <- r }()
	<-leaseEnded
	r2, err := c.Charge(ctx, &testpb.ChargeRequest{})
	if err != nil || r2.GetId() != "ch_second" {
		t.Fatalf("call after the lease: %v %v", r2, err)
	}
	close(finish)
	if r := <-first; r.GetId() != "ch_late" {
		t.Fatalf("first call got %v, want its own late response", r)
	}
	r3, err := c.Charge(ctx, &testpb.ChargeRequest{})
	if err != nil || !proto.Equal(r3, r2) {
		t.Fatalf("replay %v %v, want the second execution's %v", r3, err, r2)
	}
	if svc.calls.Load() != 2 || !sawDeadline.Load() {
		t.Fatalf("%d executions (limitation: 2), handler deadline within the lease: %v", svc.calls.Load(), sawDeadline.Load())
	}
}

const testLease = 300 * time.Millisecond

// noExtend hides a store's Extend: a store that cannot renew leases.
type noExtend struct{ keystore.Store }

// A handler that takes 3.5 leases, with 4 callers retrying the key every
// 100 ms: the lease is renewed, the handler runs once, and the retriers get
// its reply replayed.
//
// A renewal due every 100 ms that the machine does not run for a whole
// lease (a loaded CI machine can hold a timer back that long) rightly loses
// the lease: the handler is cancelled with ErrLeaseNotRenewed. That is the
// machine's doing, not the case this test checks, so the case is tried
// again with a new key and a lease four times as long, and fails if it
// happens at 16 times the lease too.
func TestHandlerRenewsLease(t *testing.T) {
	t.Parallel()
	i := 0
	leasetry.Run(t, testLease, 16*testLease, 3, func(lease time.Duration) error {
		i++
		err := renewsLease(t, lease, fmt.Sprintf("k-slow-%d", i))
		if err != nil && (status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "lease not renewed before it ended")) {
			t.Fatalf("lease %v: first call: %v", lease, err)
		}
		return err
	})
}

// renewsLease runs TestHandlerRenewsLease's case with lease and key: the
// first call's error if it failed, else nil once the case's checks passed.
func renewsLease(t *testing.T, lease time.Duration, key string) error {
	started := make(chan struct{})
	var once sync.Once
	svc := &payments{charge: func(ctx context.Context, n int64, _ *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		once.Do(func() { close(started) })
		select {
		case <-time.After(lease * 7 / 2):
			return &testpb.ChargeReply{Id: "ch_slow"}, nil
		case <-ctx.Done():
			return nil, status.Error(codes.Unavailable, context.Cause(ctx).Error())
		}
	}}
	srv := serve(t, svc, storetest.NewRefStore(), []idemgrpc.Option{idemgrpc.WithLease(lease)})
	c := dial(t, srv.addr)
	ctx := keyed(ctxT(t), "Bearer alice", key)
	var wg sync.WaitGroup
	var first *testpb.ChargeReply
	var firstErr error
	wg.Go(func() { first, firstErr = c.Charge(ctx, &testpb.ChargeRequest{}) })
	<-started
	var replays atomic.Int32
	for range 4 {
		wg.Go(func() {
			for range 200 * lease / testLease {
				r, err := c.Charge(ctx, &testpb.ChargeRequest{})
				if status.Code(err) == codes.Unavailable {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err == nil && r.GetId() == "ch_slow" {
					replays.Add(1)
				}
				return
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if first.GetId() != "ch_slow" {
		t.Fatalf("first call: %v", first)
	}
	if n := svc.calls.Load(); n != 1 || replays.Load() != 4 {
		t.Fatalf("a handler 3.5x its lease ran %d times, %d of 4 retriers got the replay; want 1 and 4", n, replays.Load())
	}
	return nil
}

// A lost lease cancels the handler's context with a cause wrapping
// ErrLeaseLost.
func TestLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	causes := make(chan error, 1)
	svc := &payments{charge: func(ctx context.Context, n int64, _ *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		s.FailExtend(keystore.ErrLeaseLost) // the key was taken away
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return nil, status.Error(codes.Aborted, "lease lost")
		case <-time.After(20 * testLease):
			causes <- nil
			return &testpb.ChargeReply{Id: "acted without a lease"}, nil
		}
	}}
	srv := serve(t, svc, s, []idemgrpc.Option{idemgrpc.WithLease(testLease)})
	c := dial(t, srv.addr)
	_, _ = c.Charge(keyed(ctxT(t), "Bearer alice", "k-lost"), &testpb.ChargeRequest{})
	if cause := <-causes; !errors.Is(cause, keystore.ErrLeaseLost) {
		t.Fatalf("handler's context cause %v, want ErrLeaseLost", cause)
	}
}

// retryPolicy retries UNAVAILABLE up to 5 attempts, quickly.
const retryPolicy = `{"methodConfig":[{"name":[{"service":"idem.testpb.Payments"}],
 "retryPolicy":{"maxAttempts":5,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// counting counts the logical calls an outer client interceptor sees.
func counting(n *atomic.Int64) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func dialRetrying(t *testing.T, addr string, logical *atomic.Int64) testpb.PaymentsClient {
	return dial(t, addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryPolicy),
		grpc.WithChainUnaryInterceptor(counting(logical), idemgrpc.UnaryClientInterceptor()))
}

// TestClientKeyKeptAcrossRetries: the service config's retry policy
// resends the call three times; every attempt carries the one key the
// client interceptor stamped once, the two that failed with Unavailable
// released it, and the third executed.
func TestClientKeyKeptAcrossRetries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	svc := &payments{charge: func(ctx context.Context, n int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		keys = append(keys, md.Get(idemgrpc.MetadataKey)...)
		mu.Unlock()
		if n < 3 {
			return nil, status.Error(codes.Unavailable, "warming up")
		}
		return &testpb.ChargeReply{Id: "ch"}, nil
	}}
	srv := serve(t, svc, nil, nil)
	var logical atomic.Int64
	c := dialRetrying(t, srv.addr, &logical)
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer alice")
	if _, err := c.Charge(ctx, &testpb.ChargeRequest{Amount: 5}); err != nil {
		t.Fatal(err)
	}
	if logical.Load() != 1 || svc.calls.Load() != 3 || len(keys) != 3 {
		t.Fatalf("%d logical calls, %d executions, keys %q; want 1, 3, three keys", logical.Load(), svc.calls.Load(), keys)
	}
	if keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("attempts carried keys %q, want one key", keys)
	}

	// A new logical call gets a new key; WithKey sets the caller's.
	if _, err := c.Charge(ctx, &testpb.ChargeRequest{Amount: 5}); err != nil {
		t.Fatal(err)
	}
	if keys[3] == keys[0] {
		t.Fatalf("second logical call reused key %q", keys[0])
	}
	for range 2 {
		if _, err := c.Charge(idemgrpc.WithKey(ctx, "order-7"), &testpb.ChargeRequest{Amount: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if svc.calls.Load() != 5 || keys[len(keys)-1] != "order-7" {
		t.Fatalf("%d executions, last key %q; want 5 and order-7 replayed", svc.calls.Load(), keys[len(keys)-1])
	}
	// A key already in the outgoing metadata is kept.
	if _, err := c.Charge(metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, "order-7"), &testpb.ChargeRequest{Amount: 5}); err != nil || svc.calls.Load() != 5 {
		t.Fatalf("explicit metadata key: %v after %d executions", err, svc.calls.Load())
	}
	_, err := c.Charge(idemgrpc.WithKey(ctx, "not a token"), &testpb.ChargeRequest{})
	if status.Code(err) != codes.InvalidArgument || svc.calls.Load() != 5 {
		t.Fatalf("invalid WithKey: %v", err)
	}
}

// TestRetryPolicyHonoursPushback: a duplicate that arrives while the first
// call runs is answered Unavailable with grpc-retry-pushback-ms; grpc-go's
// retry policy waits that long and its next attempt gets the replay.
func TestRetryPolicyHonoursPushback(t *testing.T) {
	t.Parallel()
	gate, started := make(chan struct{}), make(chan struct{})
	svc := &payments{charge: func(_ context.Context, n int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		close(started)
		<-gate
		return &testpb.ChargeReply{Id: "ch_first", Amount: req.GetAmount()}, nil
	}}
	inProgress := make(chan struct{}, 8)
	watch := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if reasonOf(err) == idemgrpc.ReasonInProgress {
			inProgress <- struct{}{}
		}
		return resp, err
	}
	srv := serve(t, svc, nil, nil, watch)
	var logical atomic.Int64
	c := dialRetrying(t, srv.addr, &logical)
	ctx := idemgrpc.WithKey(metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer alice"), "pay-1")

	var first *testpb.ChargeReply
	var firstErr error
	var wg sync.WaitGroup
	wg.Go(func() { first, firstErr = c.Charge(ctx, &testpb.ChargeRequest{Amount: 9}) })
	var second *testpb.ChargeReply
	var secondErr error
	var hdr metadata.MD
	<-started // the first call holds the key
	wg.Go(func() { second, secondErr = c.Charge(ctx, &testpb.ChargeRequest{Amount: 9}, grpc.Header(&hdr)) })
	<-inProgress // the duplicate's first attempt was told to wait
	// Longer than the policy's whole backoff schedule (10+20+40+50 ms): a
	// retry that ignored the pushback would use up its attempts meanwhile.
	time.Sleep(300 * time.Millisecond)
	close(gate)
	wg.Wait()
	if firstErr != nil || secondErr != nil {
		t.Fatalf("first %v, second %v", firstErr, secondErr)
	}
	if !proto.Equal(first, second) || svc.calls.Load() != 1 || len(hdr.Get(idemgrpc.MetadataReplayed)) != 1 {
		t.Fatalf("second %v (header %v), first %v, %d executions", second, hdr, first, svc.calls.Load())
	}
	if n := len(inProgress); n != 0 {
		t.Fatalf("%d more in-progress attempts: the pushback was not honoured", n)
	}
	if logical.Load() != 2 {
		t.Fatalf("%d logical calls, want 2", logical.Load())
	}
}
