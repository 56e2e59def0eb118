package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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
