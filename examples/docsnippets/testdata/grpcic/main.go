// Mirror of the block of docs/grpc.md. main runs it with a listener on
// 127.0.0.1 and an insecure client; the call itself is left to the
// service's generated client.
//
//docsnippets:run
package main

import (
	"context"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "modernc.org/sqlite"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/keystore/sqlitestore"
)

func serveAndDial(ctx context.Context, lis net.Listener, authenticate grpc.UnaryServerInterceptor,
	target string, creds grpc.DialOption, retryPolicy, orderID string, call func(context.Context, *grpc.ClientConn) error) error {
	store, err := sqlitestore.Open("keys.db") // any keystore.Store; import _ "modernc.org/sqlite"
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil { // or apply store.SchemaSQL() with your migration tool
		return err
	}
	ic, err := idemgrpc.New(store,
		idemgrpc.WithMethods("/payments.v1.Payments/Charge", "/payments.v1.Payments/Refund"),
		idemgrpc.WithRequired(true),
		idemgrpc.WithTTL(24*time.Hour),
		idemgrpc.WithReplayMetadata("x-charge-id"))
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate, ic.Unary))
	// register the services on srv here
	go srv.Serve(lis)
	defer srv.GracefulStop()

	conn, err := grpc.NewClient(target, creds,
		grpc.WithDefaultServiceConfig(retryPolicy), // UNAVAILABLE in retryableStatusCodes
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx = idemgrpc.WithKey(ctx, orderID) // optional: the business key
	return call(ctx, conn)
}

const retryPolicy = `{"methodConfig": [{"name": [{"service": "payments.v1.Payments"}],
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

func main() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	authenticate := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	call := func(ctx context.Context, conn *grpc.ClientConn) error { return nil }
	err = serveAndDial(context.Background(), lis, authenticate, lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), retryPolicy, "order-42", call)
	if err != nil {
		log.Fatal(err)
	}
}
