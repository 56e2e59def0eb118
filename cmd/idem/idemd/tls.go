package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

var errTLS = errors.New("invalid TLS setup")

// certFile is a certificate and key pair read from files, re-read by reload
// (on SIGHUP); connections made after a reload get the new certificate, and
// a pair that fails to load leaves the old one in use.
type certFile struct {
	certPath, keyPath string
	cur               atomic.Pointer[tls.Certificate]
}

// loadCertFile reads the pair once; an error refuses to start.
func loadCertFile(certPath, keyPath, what string) (*certFile, error) {
	if (certPath == "") != (keyPath == "") {
		return nil, fmt.Errorf("%w: %s: give both the certificate and the key, or neither", errTLS, what)
	}
	if certPath == "" {
		return nil, nil
	}
	c := &certFile{certPath: certPath, keyPath: keyPath}
	if err := c.reload(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return c, nil
}

func (c *certFile) reload() error {
	pair, err := tls.LoadX509KeyPair(c.certPath, c.keyPath)
	if err != nil {
		return fmt.Errorf("%w: %w", errTLS, err)
	}
	c.cur.Store(&pair)
	return nil
}

func (c *certFile) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }

func (c *certFile) getClient(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// serverTLS is the listener's TLS configuration: TLS 1.2 or later, the
// certificate from the reloadable pair. net/http offers HTTP/2 on it.
func serverTLS(c *certFile) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get, NextProtos: []string{"h2", "http/1.1"}}
}

// upstreamTransport is the one transport every route's proxy reaches the
// upstream with: http.DefaultTransport's settings, room for 512 idle
// connections, HTTP/2 when the upstream offers it over TLS, the CA of
// --upstream-ca as the only roots if given, and the client certificate of
// --upstream-cert (reloaded on SIGHUP) if given.
func upstreamTransport(caPath string, client *certFile) (*http.Transport, error) {
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}
	if caPath != "" {
		pem, err := os.ReadFile(caPath)
		if err != nil {
			return nil, fmt.Errorf("%w: --upstream-ca: %w", errTLS, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --upstream-ca %s: no PEM certificate in it", errTLS, caPath)
		}
		t.TLSClientConfig.RootCAs = pool
	}
	if client != nil {
		t.TLSClientConfig.GetClientCertificate = client.getClient
	}
	return t, nil
}
