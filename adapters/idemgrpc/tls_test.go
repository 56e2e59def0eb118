package idemgrpc_test

import (
	"crypto/tls"
	"testing"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"github.com/idem-go/idem/internal/testca"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// TestTLSPrincipal: with WithScopeTLS, two clients with verified
// certificates never share a key; a client without one has no principal.
func TestTLSPrincipal(t *testing.T) {
	t.Parallel()
	ca := testca.New(t)
	issue := func(l testca.Leaf) tls.Certificate { _, _, pair := ca.Issue(t, l); return pair }
	serverCreds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{issue(testca.Leaf{Serial: 2, CommonName: "server", Server: true})},
		ClientCAs:    ca.Pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	})
	svc := &payments{}
	srv := serveWith(t, svc, nil, []idemgrpc.Option{idemgrpc.WithScopeTLS()}, []grpc.ServerOption{grpc.Creds(serverCreds)})
	client := func(certs ...tls.Certificate) testpb.PaymentsClient {
		return dial(t, srv.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.Pool, Certificates: certs, MinVersion: tls.VersionTLS13,
		})))
	}
	alice := client(issue(testca.Leaf{Serial: 3, CommonName: "alice", URI: "spiffe://idem.test/alice", Client: true}))
	bob := client(issue(testca.Leaf{Serial: 4, CommonName: "bob", Client: true}))
	nobody := client()
	ctx := keyed(ctxT(t), "", "same")
	a1, err := alice.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := bob.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := alice.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	if err != nil || !proto.Equal(a1, a2) || proto.Equal(a1, b1) || svc.calls.Load() != 2 {
		t.Fatalf("alice %v/%v bob %v after %d executions (%v)", a1, a2, b1, svc.calls.Load(), err)
	}
	_, err = nobody.Charge(ctx, &testpb.ChargeRequest{Amount: 1})
	wantStatus(t, err, codes.Unauthenticated, idemgrpc.ReasonNoPrincipal)
}
