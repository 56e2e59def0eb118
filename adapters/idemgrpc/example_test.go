package idemgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
)

type chargeOnce struct {
	testpb.UnimplementedPaymentsServer
	n atomic.Int64
}

func (s *chargeOnce) Charge(_ context.Context, req *testpb.ChargeRequest) (*testpb.ChargeReply, error) {
	return &testpb.ChargeReply{Id: fmt.Sprintf("ch_%d", s.n.Add(1)), Amount: req.GetAmount()}, nil
}

// A server with the idempotency interceptor over an in-memory store, and a
// client whose interceptor sends one key per logical call. The second call
// passes the same key (as an application retry would) and is replayed.
func Example() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	idem, err := idemgrpc.New(store, idemgrpc.WithMethods(testpb.Payments_Charge_FullMethodName))
	if err != nil {
		panic(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem.Unary))
	svc := &chargeOnce{}
	testpb.RegisterPaymentsServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	client := testpb.NewPaymentsClient(cc)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice")
	ctx = idemgrpc.WithKey(ctx, "order-42")
	for range 2 {
		var hdr metadata.MD
		r, err := client.Charge(ctx, &testpb.ChargeRequest{Account: "acct_1", Amount: 500}, grpc.Header(&hdr))
		if err != nil {
			panic(err)
		}
		fmt.Println(r.GetId(), r.GetAmount(), "replayed:", hdr.Get(idemgrpc.MetadataReplayed))
	}
	fmt.Println("executions:", svc.n.Load())
	// Output:
	// ch_1 500 replayed: []
	// ch_1 500 replayed: [true]
	// executions: 1
}

// countOutcomes is a Hooks that counts the outcomes it sees.
type countOutcomes map[idemgrpc.Outcome]int

func (c countOutcomes) Call(o idemgrpc.Outcome, _ time.Duration) { c[o]++ }

// Hooks see each call's outcome, in idemhttp's vocabulary: here the handler
// is called directly, as a server would, once and then with the same key.
func ExampleWithHooks() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	seen := countOutcomes{}
	idem, err := idemgrpc.New(store, idemgrpc.WithHooks(seen))
	if err != nil {
		panic(err)
	}
	charge := func(context.Context, any) (any, error) { return &testpb.ChargeReply{Id: "ch_1"}, nil }
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice", idemgrpc.MetadataKey, "order-42"))
	info := &grpc.UnaryServerInfo{FullMethod: testpb.Payments_Charge_FullMethodName}
	for range 2 {
		if _, err := idem.Unary(ctx, &testpb.ChargeRequest{Amount: 500}, info, charge); err != nil {
			panic(err)
		}
	}
	fmt.Println(seen[idemhttp.OutcomeExecuted], "executed,", seen[idemhttp.OutcomeReplayed], "replayed")
	// Output: 1 executed, 1 replayed
}
