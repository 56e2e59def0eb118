package idemgrpc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

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
