package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testca"
)

// testCA issues certificates for the TLS tests.
type testCA struct{ *testca.CA }

func newTestCA(t *testing.T) *testCA { return &testCA{testca.New(t)} }

// issue returns a PEM certificate and key for 127.0.0.1, usable by servers
// and clients, with the given serial number and common name.
func (ca *testCA) issue(t *testing.T, serial int64, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, _ := ca.Issue(t, testca.Leaf{Serial: serial, CommonName: cn, Server: true, Client: true})
	return c, k
}

func (ca *testCA) issueFiles(t *testing.T, dir, name string, serial int64) (certPath, keyPath string) {
	t.Helper()
	c, k := ca.issue(t, serial, name)
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, certPath, string(c))
	writeFile(t, keyPath, string(k))
	return certPath, keyPath
}

// seen is what the TLS upstream reports about the request it got.
type seen struct {
	XFF, XFProto, XFHost, Forwarded, ClientCN, Proto string
}

// newTLSUpstream is an HTTPS upstream, with its certificate from ca, that
// requires a client certificate from ca and answers with what it saw.
func newTLSUpstream(t *testing.T, ca *testCA) *httptest.Server {
	t.Helper()
	c, k := ca.issue(t, 100, "upstream")
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{XFF: r.Header.Get("X-Forwarded-For"), XFProto: r.Header.Get("X-Forwarded-Proto"),
			XFHost: r.Header.Get("X-Forwarded-Host"), Forwarded: r.Header.Get("Forwarded"), Proto: r.Proto}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			s.ClientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(s)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool}
	up.EnableHTTP2 = true
	up.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes of TestServeTLSRefusals
	up.StartTLS()
	t.Cleanup(up.Close)
	return up
}

// h2Client trusts ca and speaks HTTP/2 over TLS.
func h2Client(ca *testCA) *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool}, ForceAttemptHTTP2: true,
	}}
}

func tlsPost(t *testing.T, c *http.Client, url, key string, hdr map[string]string) (*http.Response, seen) {
	t.Helper()
	req := keyedRequest(t, url, key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var s seen
	if res.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("upstream answer %q: %v", b, err)
		}
	}
	return res, s
}

// tlsSetup makes a CA, its PEM file and an HTTPS upstream that requires
// client certificates from it.
func tlsSetup(t *testing.T) (dir string, ca *testCA, up *httptest.Server, caPath string) {
	t.Helper()
	dir = t.TempDir()
	ca = newTestCA(t)
	up = newTLSUpstream(t, ca)
	caPath = filepath.Join(dir, "ca.pem")
	writeFile(t, caPath, string(ca.PEM))
	return dir, ca, up, caPath
}

// HTTPS and HTTP/2 to clients, HTTPS with a private CA and a client
// certificate to the upstream, forwarding headers from trusted and
// untrusted peers, and a certificate swapped by SIGHUP.
func TestServeTLSGateway(t *testing.T) {
	t.Parallel()
	dir, ca, up, caPath := tlsSetup(t)
	srvCert, srvKey := ca.issueFiles(t, dir, "gateway", 2)
	cliCert, cliKey := ca.issueFiles(t, dir, "idem-gateway", 3)
	tlsFlags := []string{"--tls-cert", srvCert, "--tls-key", srvKey, "--upstream-ca", caPath, "--upstream-cert", cliCert, "--upstream-key", cliKey}
	incoming := map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Host": "shop.example", "X-Forwarded-Proto": "https", "Forwarded": "for=203.0.113.7;proto=https"}

	for _, tc := range []struct {
		name, trusted string
		want          func(host string) seen
	}{
		{"loopback trusted", "127.0.0.1/32", func(host string) seen {
			return seen{XFF: "203.0.113.7, 127.0.0.1", XFProto: "https", XFHost: "shop.example",
				Forwarded: `for=203.0.113.7;proto=https, for=127.0.0.1;host="` + host + `";proto=https`}
		}},
		{"nothing trusted", "", func(host string) seen {
			return seen{XFF: "127.0.0.1", XFProto: "https", XFHost: host, Forwarded: `for=127.0.0.1;host="` + host + `";proto=https`}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startServe(t, up.URL, "memory", append(tlsFlags, "--trusted-proxies", tc.trusted)...)
			base := strings.Replace(p.url, "http://", "https://", 1)
			host := strings.TrimPrefix(base, "https://")
			c := h2Client(ca)
			res, got := tlsPost(t, c, base+"/orders", "k1", incoming)
			if res.StatusCode != 201 || res.ProtoMajor != 2 {
				t.Fatalf("keyed request: %d over %s, want 201 over HTTP/2", res.StatusCode, res.Proto)
			}
			want := tc.want(host)
			want.ClientCN, want.Proto = "idem-gateway", got.Proto
			if got != want {
				t.Fatalf("upstream saw\n %+v\nwant\n %+v", got, want)
			}
			if !strings.HasPrefix(got.Proto, "HTTP/2") {
				t.Errorf("upstream reached over %s, want HTTP/2 (the shared transport attempts it over TLS)", got.Proto)
			}
			res, again := tlsPost(t, c, base+"/orders", "k1", incoming)
			if res.ProtoMajor != 2 || res.Header.Get("Idempotent-Replayed") != "true" || again != got {
				t.Fatalf("replay over HTTP/2: %s replayed=%q %+v", res.Proto, res.Header.Get("Idempotent-Replayed"), again)
			}
		})
	}

	t.Run("SIGHUP swaps the certificate", func(t *testing.T) {
		p := startServe(t, up.URL, "memory", tlsFlags...)
		base := strings.Replace(p.url, "http://", "https://", 1)
		serial := func() int64 {
			c := h2Client(ca) // a new connection each time
			res, _ := tlsPost(t, c, base+"/orders", "", nil)
			c.CloseIdleConnections()
			return res.TLS.PeerCertificates[0].SerialNumber.Int64()
		}
		if s := serial(); s != 2 {
			t.Fatalf("serial %d, want 2", s)
		}
		writeFile(t, srvCert, "not a certificate")
		hup(t, p, "certificate", "error", "1")
		if s := serial(); s != 2 {
			t.Fatalf("after a bad certificate file: serial %d, want the old 2", s)
		}
		c, k := ca.issue(t, 7, "gateway")
		writeFile(t, srvKey, string(k))
		writeFile(t, srvCert, string(c))
		hup(t, p, "certificate", "ok", "1")
		if s := serial(); s != 7 {
			t.Fatalf("after SIGHUP: serial %d, want the new 7", s)
		}
	})
}

// Without the client certificate the upstream refuses the handshake: the
// proxy answers 502 and releases the key; a missing --tls-key is refused at
// start.
func TestServeTLSRefusals(t *testing.T) {
	t.Parallel()
	dir, ca, up, caPath := tlsSetup(t)
	p := startServe(t, up.URL, "memory", "--upstream-ca", caPath)
	if r := post(t, p.url, "/orders", "k", "x"); r.status != 502 {
		t.Fatalf("upstream without a client certificate: %d %s, want 502", r.status, r.body)
	}
	certPath, _ := ca.issueFiles(t, dir, "gateway", 2)
	for _, args := range [][]string{
		{"--tls-cert", certPath},
		{"--upstream-ca", caPath, "--upstream", "http://127.0.0.1:1"},
		{"--upstream-ca", filepath.Join(dir, "missing.pem")},
	} {
		out, err := runServeExit(t, append([]string{"--upstream", up.URL, "--store", "memory"}, args...)...)
		if err == nil {
			t.Errorf("%v: started; output %q", args, out)
		}
	}
}

// --h2c: HTTP/2 without TLS, as a load balancer speaks it to backends.
func TestServeH2C(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startServe(t, up.srv.URL, "memory", "--h2c")
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Protocols: protos}}
	for i, want := range []string{"", "true"} {
		res, err := c.Do(keyedRequest(t, p.url+"/orders", "h1"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.ProtoMajor != 2 || res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != want {
			t.Fatalf("#%d: %d over %s replayed=%q", i, res.StatusCode, res.Proto, res.Header.Get("Idempotent-Replayed"))
		}
	}
	if n := up.count("/orders"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
}

func keyedRequest(t *testing.T, url, key string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer e2e-client")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return req
}
