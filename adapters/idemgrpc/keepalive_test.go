package idemgrpc_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testLease = 300 * time.Millisecond

// noExtend hides a store's Extend: a store that cannot renew leases.
type noExtend struct{ keystore.Store }

// A handler that takes 3.5 leases, with 4 callers retrying the key every
// 100 ms: the lease is renewed, the handler runs once, and the retriers get
// its reply replayed.
func TestHandlerRenewsLease(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var once sync.Once
	svc := &payments{charge: func(ctx context.Context, n int64, _ *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		once.Do(func() { close(started) })
		select {
		case <-time.After(testLease * 7 / 2):
			return &testpb.ChargeReply{Id: "ch_slow"}, nil
		case <-ctx.Done():
			return nil, status.Error(codes.Unavailable, context.Cause(ctx).Error())
		}
	}}
	srv := serve(t, svc, storetest.NewRefStore(), []idemgrpc.Option{idemgrpc.WithLease(testLease)})
	c := dial(t, srv.addr)
	ctx := keyed(ctxT(t), "Bearer alice", "k-slow")
	var wg sync.WaitGroup
	var first *testpb.ChargeReply
	var firstErr error
	wg.Go(func() { first, firstErr = c.Charge(ctx, &testpb.ChargeRequest{}) })
	<-started
	var replays atomic.Int32
	for range 4 {
		wg.Go(func() {
			for range 200 {
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
	if firstErr != nil || first.GetId() != "ch_slow" {
		t.Fatalf("first call: %v %v", first, firstErr)
	}
	if n := svc.calls.Load(); n != 1 || replays.Load() != 4 {
		t.Fatalf("a handler 3.5x its lease ran %d times, %d of 4 retriers got the replay; want 1 and 4", n, replays.Load())
	}
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
