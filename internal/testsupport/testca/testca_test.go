package testca_test

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testca"
)

// A server and a client certificate verify against the CA for their use,
// and the PEM forms load as a key pair.
func TestIssue(t *testing.T) {
	ca := testca.New(t)
	for _, c := range []struct {
		leaf  testca.Leaf
		usage x509.ExtKeyUsage
	}{
		{testca.Leaf{Serial: 2, CommonName: "server", Server: true}, x509.ExtKeyUsageServerAuth},
		{testca.Leaf{Serial: 3, CommonName: "alice", URI: "spiffe://idem.test/alice", Client: true}, x509.ExtKeyUsageClientAuth},
	} {
		certPEM, keyPEM, pair := ca.Issue(t, c.leaf)
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		opts := x509.VerifyOptions{Roots: ca.Pool, KeyUsages: []x509.ExtKeyUsage{c.usage}}
		if c.leaf.Server {
			opts.DNSName = "127.0.0.1"
		}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s: %v", c.leaf.CommonName, err)
		}
		if c.leaf.URI != "" && (len(cert.URIs) != 1 || cert.URIs[0].String() != c.leaf.URI) {
			t.Errorf("URIs %v", cert.URIs)
		}
	}
}
