package idemgrpc_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemgrpc"
	"github.com/idem-go/idem/adapters/idemgrpc/internal/testpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idem test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, serial int64, cn string, uri string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if uri != "" {
		u, _ := url.Parse(uri)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLSPrincipal: with WithScopeTLS, two clients with verified
// certificates never share a key; a client without one has no principal.
func TestTLSPrincipal(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	serverCreds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, 2, "server", "", true)},
		ClientCAs:    ca.pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	})
	svc := &payments{}
	srv := serveWith(t, svc, nil, []idemgrpc.Option{idemgrpc.WithScopeTLS()}, []grpc.ServerOption{grpc.Creds(serverCreds)})
	client := func(certs ...tls.Certificate) testpb.PaymentsClient {
		return dial(t, srv.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.pool, Certificates: certs, MinVersion: tls.VersionTLS13,
		})))
	}
	alice := client(ca.issue(t, 3, "alice", "spiffe://idem.test/alice", false))
	bob := client(ca.issue(t, 4, "bob", "", false))
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
