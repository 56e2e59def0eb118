package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

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
func TestDeadlineExpiresWhileHandlerRuns(t *testing.T) {
	t.Parallel()
	fs := &faultyStore{Store: newMem(t)}
	done := make(chan struct{})
	// gaveUp is closed once the client has seen its deadline: the server's
	// copy of the deadline fires a little earlier than the client's, and a
	// reply sent in between would reach the client in time.
	gaveUp := make(chan struct{})
	svc := &payments{charge: func(ctx context.Context, n int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		<-ctx.Done() // the client's deadline; the effect goes on regardless
		<-gaveUp
		if n == 1 {
			defer close(done)
		}
		return &testpb.ChargeReply{Id: "ch_slow", Amount: req.GetAmount()}, nil
	}}
	srv := serve(t, svc, fs, []idemgrpc.Option{idemgrpc.WithWait(10 * time.Second)})
	c := dial(t, srv.addr)
	base := keyed(ctxT(t), "Bearer alice", "k-deadline")
	short, cancel := context.WithTimeout(base, 50*time.Millisecond)
	defer cancel()
	_, err := c.Charge(short, &testpb.ChargeRequest{Amount: 3})
	close(gaveUp)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("first call: %v, want DeadlineExceeded", err)
	}
	<-done
	var hdr metadata.MD
	r, err := c.Charge(base, &testpb.ChargeRequest{Amount: 3}, grpc.Header(&hdr))
	if err != nil || r.GetId() != "ch_slow" || len(hdr.Get(idemgrpc.MetadataReplayed)) != 1 {
		t.Fatalf("retry: %v %v (header %v), want the replay of ch_slow", r, err, hdr)
	}
	if svc.calls.Load() != 1 || fs.completes.Load() != 1 || fs.cancelledCompletes.Load() != 0 {
		t.Fatalf("%d executions, %d completes (%d under a cancelled ctx)", svc.calls.Load(), fs.completes.Load(), fs.cancelledCompletes.Load())
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
