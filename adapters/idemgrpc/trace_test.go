package idemgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/internal/tracing"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A keyed call is one span, child of the call's context, the handler under
// it, ended with the call's outcome (and, when the client got an error,
// failed); a call that passes through makes none, and no attribute holds
// the key.
func TestTraceKeyedCalls(t *testing.T) {
	t.Parallel()
	rec := &tracing.Recorder{}
	svc := &payments{charge: func(ctx context.Context, n int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		_, s := rec.Start(ctx, "handler")
		s.End("", nil)
		if req.GetAccount() == "down" {
			return nil, status.Error(codes.Unavailable, "ledger down")
		}
		return &testpb.ChargeReply{Id: fmt.Sprint("ch_", n), Amount: req.GetAmount()}, nil
	}}
	c := client(t, svc, nil, idemgrpc.WithTracer(rec))
	calls := []struct {
		key, account string
		code         codes.Code
	}{
		{"k-traced-call", "acct", codes.OK},                  // executed
		{"k-traced-call", "acct", codes.OK},                  // replayed
		{"", "acct", codes.OK},                               // no key: passes through
		{"k-failing-call", "down", codes.Unavailable},        // released
		{"k-traced-call", "other", codes.FailedPrecondition}, // the key reused
	}
	for i, call := range calls {
		_, err := c.Charge(keyed(ctxT(t), "Bearer alice", call.key), &testpb.ChargeRequest{Account: call.account, Amount: 5})
		if status.Code(err) != call.code {
			t.Fatalf("call %d: %v, want %v", i, err, call.code)
		}
	}
	spans := rec.Named(idem.OpGRPCCall)
	want := []struct {
		outcome, key string
		failed       bool
	}{
		{"executed", "k-traced-call", false},
		{"replayed", "k-traced-call", false},
		{"released", "k-failing-call", true},
		{"mismatch", "k-traced-call", true},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d call spans, want %d (none for the unkeyed call)", len(spans), len(want))
	}
	for i, s := range spans {
		w := want[i]
		if s.Result != w.outcome || s.Key != w.key || (s.Err != nil) != w.failed || s.Ended != 1 || s.Parent != 0 {
			t.Errorf("span %d: %q key %q err %v ended %d parent %d; want %q key %q failed %v", i, s.Result, s.Key, s.Err, s.Ended, s.Parent, w.outcome, w.key, w.failed)
		}
		if s.Attrs[idem.AttrRoute] != testpb.Payments_Charge_FullMethodName {
			t.Errorf("span %d: route %v", i, s.Attrs[idem.AttrRoute])
		}
		for k, v := range s.Attrs {
			if strings.Contains(fmt.Sprint(v), "k-") {
				t.Errorf("span %d: attribute %s = %v holds a key", i, k, v)
			}
		}
	}
	handlers := rec.Named("handler")
	if len(handlers) != 3 || handlers[0].Parent != spans[0].ID || handlers[2].Parent != spans[2].ID {
		t.Errorf("handler spans %+v: want the executed and released calls' handlers under their call spans", handlers)
	}
}
