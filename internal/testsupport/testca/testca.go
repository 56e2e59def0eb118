// Package testca issues throwaway TLS certificates for idem's tests: a CA
// and leaf certificates for loopback servers and for clients, valid for an
// hour around now. It imports only the standard library, so that any
// module's tests can use it.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"
)

// CA is a certificate authority for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte         // Cert, PEM-encoded
	Pool *x509.CertPool // holds Cert, to trust it
}

// Leaf describes a certificate to issue.
type Leaf struct {
	Serial     int64
	CommonName string
	URI        string // a URI SAN, such as a SPIFFE id ("" for none)
	Server     bool   // server auth, for 127.0.0.1 and localhost
	Client     bool   // client auth
}

// New returns a fresh CA.
func New(t testing.TB) *CA {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idem test CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	cert, key, der := create(t, tmpl, nil, nil)
	ca := &CA{Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der), Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	return ca
}

// Issue returns a certificate signed by ca, as PEM (certificate and EC
// private key) and as a tls.Certificate.
func (ca *CA) Issue(t testing.TB, l Leaf) (certPEM, keyPEM []byte, pair tls.Certificate) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(l.Serial), Subject: pkix.Name{CommonName: l.CommonName},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if l.URI != "" {
		u, err := url.Parse(l.URI)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	_, key, der := create(t, tmpl, ca.Cert, ca.Key)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", kder), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// create makes a key and a certificate for it from tmpl, signed by parent
// (self-signed when parent is nil), valid from an hour ago to an hour on.
func create(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, der
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
