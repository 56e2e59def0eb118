package idemgrpc_test

// Tests of the handler's context (issue 28): it outlives the client's
// deadline, ends on the handler timeout and Abort (and on lease loss:
// TestLostLeaseCancelsHandler), carries the key and the claim;
// WithClientCancel restores grpc-go's cancellation.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/internal/testsupport/httptestx"
	"github.com/idem-go/idem/keystore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A client whose deadline (50 ms) is shorter than the handler (200 ms)
// retries with the same key until it succeeds: each key is charged once,
// and the retry that succeeds after a charge gets the replay. Before the
// handler's context was detached from the call's, the deadline cut the
// provider call (Unavailable), the key was released and every retry
// charged again.
func TestClientDeadlineDoesNotRepeatTheEffect(t *testing.T) {
	t.Parallel()
	var charges httptestx.Ledger
	svc := &payments{charge: func(ctx context.Context, _ int64, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
		key, _ := idemgrpc.KeyFrom(ctx)
		n := charges.Charge(key) // the provider has the charge
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return nil, status.Error(codes.Unavailable, "provider call cancelled")
		}
		return &testpb.ChargeReply{Id: fmt.Sprintf("ch_%s_%d", key, n), Amount: req.GetAmount()}, nil
	}}
	c := dial(t, serve(t, svc, nil, nil).addr)
	base := ctxT(t)
	finals := charges.Retry(10, func(key string, timeout time.Duration) (string, bool, bool) {
		ctx, cancel := context.WithTimeout(keyed(base, "Bearer alice", key), timeout)
		defer cancel()
		var hdr metadata.MD
		r, err := c.Charge(ctx, &testpb.ChargeRequest{Amount: 3}, grpc.Header(&hdr))
		if err == nil {
			return r.GetId(), len(hdr.Get(idemgrpc.MetadataReplayed)) == 1, true
		}
		if base.Err() != nil {
			return err.Error(), false, true
		}
		time.Sleep(10 * time.Millisecond) // a client's back-off
		return "", false, false
	})
	charges.CheckChargedOnce(t, finals, func(key string) string { return "ch_" + key + "_1" })
}

// ended reports the Err and cause of a handler's context once it ends.
type ended struct {
	started chan struct{}
	errs    chan [2]error
}

func newEnded() *ended { return &ended{started: make(chan struct{}, 4), errs: make(chan [2]error, 4)} }

func (e *ended) handler(ctx context.Context, _ any) (any, error) {
	e.started <- struct{}{}
	<-ctx.Done()
	e.errs <- [2]error{ctx.Err(), context.Cause(ctx)}
	return nil, status.Error(codes.Unavailable, "stopped")
}

func (e *ended) wait(t *testing.T, what string) (error, error) {
	t.Helper()
	select {
	case got := <-e.errs:
		return got[0], got[1]
	case <-t.Context().Done():
		t.Fatalf("the handler's context did not end on %s", what)
		return nil, nil
	}
}

func newInterceptor(t *testing.T, s keystore.Store, opts ...idemgrpc.Option) *idemgrpc.Interceptor {
	t.Helper()
	if s == nil {
		s = newMem(t)
	}
	ic, err := idemgrpc.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ic
}

func callAsync(ctx context.Context, ic *idemgrpc.Interceptor, h grpc.UnaryHandler, key string) <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := call(ctx, ic, charge, &testpb.ChargeRequest{Amount: 1}, h, "authorization", "Bearer alice", idemgrpc.MetadataKey, key)
		out <- err
	}()
	return out
}

func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	ic := newInterceptor(t, nil, idemgrpc.WithHandlerTimeout(50*time.Millisecond))
	e := newEnded()
	got := callAsync(t.Context(), ic, e.handler, "k")
	if errc, cause := e.wait(t, "the handler timeout"); !errors.Is(errc, context.DeadlineExceeded) || !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("Err %v, cause %v; want DeadlineExceeded", errc, cause)
	}
	wantStatus(t, <-got, codes.Unavailable, "")
	if _, err := idemgrpc.New(newMem(t), idemgrpc.WithHandlerTimeout(-1)); err == nil {
		t.Fatal("a negative handler timeout was accepted")
	}
}

// The call's cancellation does not end the handler's context; with
// WithClientCancel(true) it does.
func TestClientCancel(t *testing.T) {
	t.Parallel()
	for _, optOut := range []bool{false, true} {
		t.Run(fmt.Sprint("WithClientCancel=", optOut), func(t *testing.T) {
			t.Parallel()
			ic := newInterceptor(t, nil, idemgrpc.WithClientCancel(optOut))
			e := newEnded()
			ctx, cancel := context.WithCancel(t.Context())
			h := e.handler
			released := make(chan struct{})
			if !optOut {
				// The handler goes on after the call's context ended,
				// and its context is still live; it then answers.
				h = func(hctx context.Context, _ any) (any, error) {
					e.started <- struct{}{}
					<-released
					if hctx.Err() != nil {
						return nil, fmt.Errorf("the handler's context ended with the call's: %w", context.Cause(hctx))
					}
					return &testpb.ChargeReply{Id: "ch"}, nil
				}
			}
			got := callAsync(ctx, ic, h, "k")
			<-e.started
			cancel()
			if optOut {
				if errc, _ := e.wait(t, "the call's cancellation"); !errors.Is(errc, context.Canceled) {
					t.Fatalf("Err %v, want Canceled", errc)
				}
				<-got
				return
			}
			close(released)
			if err := <-got; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Abort ends the handlers in flight, and those that start later.
func TestAbort(t *testing.T) {
	t.Parallel()
	ic := newInterceptor(t, nil)
	e := newEnded()
	got := callAsync(t.Context(), ic, e.handler, "k1")
	<-e.started
	ic.Abort()
	if errc, cause := e.wait(t, "Abort"); !errors.Is(errc, context.Canceled) || cause == nil || !strings.Contains(cause.Error(), "abort") {
		t.Fatalf("Err %v, cause %v; want Canceled by the abort", errc, cause)
	}
	<-got
	got = callAsync(t.Context(), ic, e.handler, "k2")
	e.wait(t, "an earlier Abort")
	<-got
}

func TestKeyAndClaimInContext(t *testing.T) {
	t.Parallel()
	ic := newInterceptor(t, nil)
	var key string
	var claim keystore.Claim
	var kok, cok bool
	h := func(ctx context.Context, _ any) (any, error) {
		key, kok = idemgrpc.KeyFrom(ctx)
		claim, cok = idemgrpc.ClaimFrom(ctx)
		return &testpb.ChargeReply{Id: "ch"}, nil
	}
	if _, err := call(t.Context(), ic, charge, &testpb.ChargeRequest{}, h, "authorization", "Bearer a", idemgrpc.MetadataKey, `"order-42"`); err != nil {
		t.Fatal(err)
	}
	if !kok || key != "order-42" {
		t.Errorf("KeyFrom: %q %v, want order-42 unquoted", key, kok)
	}
	if !cok || claim.State != keystore.Acquired || claim.Token == 0 || claim.Takeover {
		t.Errorf("ClaimFrom: %+v %v", claim, cok)
	}
	if _, ok := idemgrpc.KeyFrom(t.Context()); ok {
		t.Error("KeyFrom outside a handler reported a key")
	}
}

// notMigrated is a store whose table does not exist, as a SQL store before
// Migrate (keystore's TestCheck covers sqlstore's error).
type notMigrated struct{ keystore.Store }

func (notMigrated) Reserve(context.Context, string, []byte, time.Duration) (keystore.Claim, error) {
	return keystore.Claim{}, fmt.Errorf("sqlstore: reserve: idem_keys: table does not exist: %w", keystore.ErrNotMigrated)
}

// An unmigrated store fails a keyed call with FailedPrecondition naming
// Migrate, which clients do not retry, rather than Unavailable forever.
func TestUnmigratedStore(t *testing.T) {
	t.Parallel()
	ic := newInterceptor(t, notMigrated{newMem(t)})
	ran := false
	_, err := call(t.Context(), ic, charge, &testpb.ChargeRequest{}, func(context.Context, any) (any, error) { ran = true; return nil, nil },
		"authorization", "Bearer a", idemgrpc.MetadataKey, "k")
	wantStatus(t, err, codes.FailedPrecondition, idemgrpc.ReasonNotMigrated)
	if !strings.Contains(status.Convert(err).Message(), "Migrate") || ran {
		t.Fatalf("%v (handler ran: %v), want a message naming Migrate and no execution", err, ran)
	}
}
