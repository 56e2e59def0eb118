package idemgrpc_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestOperatorReleaseWhileRunning: an operator releases (fenced) the key of
// a call in progress. The handler's context ends, the client gets
// Unavailable LEASE_LOST (retry with the same key), nothing is released or
// stored by the interceptor (the key is no longer its), no "release
// failed" is logged, and the retry executes.
func TestOperatorReleaseWhileRunning(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	var logs testenv.SyncBuffer
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	svc := &payments{charge: func(ctx context.Context, n int64, _ *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		if runs.Add(1) > 1 {
			return &testpb.ChargeReply{Id: "second"}, nil
		}
		started <- struct{}{}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(20 * testLease):
			return &testpb.ChargeReply{Id: "first, never cancelled"}, nil
		}
	}}
	srv := serve(t, svc, s, []idemgrpc.Option{
		idemgrpc.WithLease(testLease),
		idemgrpc.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	})
	c := dial(t, srv.addr)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Charge(keyed(ctxT(t), "Bearer alice", "k-op"), &testpb.ChargeRequest{})
		errs <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	infos, _, err := s.List(t.Context(), keystore.ListOptions{})
	if err != nil || len(infos) != 1 || infos[0].State != keystore.InProgress {
		t.Fatalf("keys %+v %v, want one in progress", infos, err)
	}
	if err := keystore.ReleaseToken(t.Context(), s, infos[0].Key, infos[0].Token); err != nil {
		t.Fatalf("operator release: %v", err)
	}
	var cerr error
	select {
	case cerr = <-errs:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end once its key was released")
	}
	st := status.Convert(cerr)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "released by an operator") {
		t.Fatalf("call ended with %v, want Unavailable: released by an operator", cerr)
	}
	if reason := reasonOf(cerr); reason != idemgrpc.ReasonLeaseLost {
		t.Fatalf("reason %q, want %s", reason, idemgrpc.ReasonLeaseLost)
	}
	if l := logs.String(); strings.Contains(l, "release failed") || strings.Contains(l, "level=ERROR") || !strings.Contains(l, "released by an operator") {
		t.Fatalf("server log:\n%s", l)
	}
	r, err := c.Charge(keyed(ctxT(t), "Bearer alice", "k-op"), &testpb.ChargeRequest{})
	if err != nil || r.GetId() != "second" {
		t.Fatalf("retry: %v %v, want the second execution", r, err)
	}
}
