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
	"google.golang.org/grpc/metadata"
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
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
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
		ctx := metadata.AppendToOutgoingContext(keyed(ctxT(t), "Bearer alice", call.key), "traceparent", traceparent)
		_, err := c.Charge(ctx, &testpb.ChargeRequest{Account: call.account, Amount: 5})
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
		{"released", "k-failing-call", false}, // the handler's answer, not idem's failure
		{"mismatch", "k-traced-call", false},  // the client's reuse of a key
	}
	if len(spans) != len(want) {
		t.Fatalf("%d call spans, want %d (none for the unkeyed call)", len(spans), len(want))
	}
	for i, s := range spans {
		w := want[i]
		if s.Result != w.outcome || s.Key != w.key || (s.Err != nil) != w.failed || s.Ended != 1 || s.Parent != 0 {
			t.Errorf("span %d: %q key %q err %v ended %d parent %d; want %q key %q failed %v", i, s.Result, s.Key, s.Err, s.Ended, s.Parent, w.outcome, w.key, w.failed)
		}
		if len(s.Links) != 1 || s.Links[0].Get("traceparent") != traceparent {
			t.Errorf("span %d: links %v, want the call's traceparent", i, s.Links)
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

// The key store failing marks the call's span failed; the client's error
// is the store's outage, never the key.
func TestTraceStoreError(t *testing.T) {
	t.Parallel()
	rec := &tracing.Recorder{}
	c := client(t, &payments{}, &faultyStore{Store: newMem(t), reserveErr: errDown}, idemgrpc.WithTracer(rec))
	_, err := c.Charge(keyed(ctxT(t), "Bearer a", "k-store-down"), &testpb.ChargeRequest{})
	wantStatus(t, err, codes.Unavailable, idemgrpc.ReasonStore)
	spans := rec.Named(idem.OpGRPCCall)
	if len(spans) != 1 || spans[0].Result != "store_error" || spans[0].Err == nil || strings.Contains(spans[0].Err.Error(), "k-store-down") {
		t.Fatalf("spans %+v, want one store_error, failed, without the key", spans)
	}
}
