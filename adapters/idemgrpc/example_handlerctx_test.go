package idemgrpc_test

import (
	"context"
	"fmt"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/keystore/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// The handler reads the client's key, unquoted, to pass it downstream, and
// the claim, whose token fences its writes.
func ExampleKeyFrom() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ic, err := idemgrpc.New(store)
	if err != nil {
		panic(err)
	}
	handler := func(ctx context.Context, req any) (any, error) {
		key, _ := idemgrpc.KeyFrom(ctx)
		claim, _ := idemgrpc.ClaimFrom(ctx)
		fmt.Printf("key %s, token > 0: %v, takeover: %v\n", key, claim.Token > 0, claim.Takeover)
		return &testpb.ChargeReply{Id: "ch_1"}, nil
	}
	// What grpc-go hands the interceptor for a call with this metadata.
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		"authorization", "Bearer alice", idemgrpc.MetadataKey, `"order-42"`))
	info := &grpc.UnaryServerInfo{FullMethod: testpb.Payments_Charge_FullMethodName}
	resp, err := ic.Unary(ctx, &testpb.ChargeRequest{Amount: 5}, info, handler)
	fmt.Println(resp.(*testpb.ChargeReply).GetId(), err)
	// Output:
	// key order-42, token > 0: true, takeover: false
	// ch_1 <nil>
}
