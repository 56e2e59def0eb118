package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/idem-go/idem/keystore/memstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

func parseUpstream(f serveFlags) (*url.URL, error) {
	target, err := url.Parse(f.upstream)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return nil, fmt.Errorf("serve: --upstream %q: want an http:// or https:// URL", f.upstream)
	}
	if target.Scheme != "https" && (f.upstreamCA != "" || f.upstreamCert != "") {
		return nil, fmt.Errorf("serve: %w --upstream-ca and --upstream-cert need an https:// --upstream, not %q", errFlag, f.upstream)
	}
	return target, nil
}

// gatewayTLS is what idem serve loaded for TLS and forwarding.
type gatewayTLS struct {
	server   *certFile // nil: plain HTTP
	client   *certFile // nil: no client certificate to the upstream
	upstream http.RoundTripper
	trusted  trustedProxies
}

func loadTLS(f serveFlags) (*gatewayTLS, error) {
	var t gatewayTLS
	var err error
	if t.trusted, err = parseTrustedProxies(f.trustedProxies); err != nil {
		return nil, err
	}
	if t.server, err = loadCertFile(f.tlsCert, f.tlsKey, "--tls-cert/--tls-key"); err != nil {
		return nil, err
	}
	if t.client, err = loadCertFile(f.upstreamCert, f.upstreamKey, "--upstream-cert/--upstream-key"); err != nil {
		return nil, err
	}
	if t.upstream, err = upstreamTransport(f.upstreamCA, t.client); err != nil {
		return nil, err
	}
	return &t, nil
}

// onSIGHUP runs fn on each SIGHUP until the returned stop is called; stop
// waits for a reload under way.
func onSIGHUP(fn func()) (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-c:
				fn()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
		<-exited
	}
}

// reload re-reads the --config file and the certificates. Each is swapped
// only if it loads whole; otherwise the old one stays, and the error is
// logged and counted.
func reload(g *gateway, f serveFlags, t *gatewayTLS, log *slog.Logger, reloads *prometheus.CounterVec) {
	count := func(what string, err error) {
		result := "ok"
		if err != nil {
			result = "error"
		}
		reloads.WithLabelValues(what, result).Inc()
	}
	if f.config != "" {
		ps, err := g.loadFile(f.config)
		if err != nil {
			log.Error("SIGHUP: the config file was refused; still serving the previous policy", "file", f.config, "err", err)
		} else {
			log.Info("SIGHUP: config reloaded; requests already running finish under the previous policy", "file", f.config, "routes", ps.routes)
		}
		count("config", err)
	}
	for _, c := range []struct {
		what string
		cf   *certFile
	}{{"certificate", t.server}, {"upstream-certificate", t.client}} {
		if c.cf == nil {
			continue
		}
		err := c.cf.reload()
		if err != nil {
			log.Error("SIGHUP: the certificate was refused; new connections keep the previous one", "cert", c.cf.certPath, "err", err)
		} else {
			log.Info("SIGHUP: certificate reloaded for new connections", "cert", c.cf.certPath)
		}
		count(c.what, err)
	}
	if f.config == "" && t.server == nil && t.client == nil {
		log.Info("SIGHUP: nothing to reload (no --config, --tls-cert or --upstream-cert)")
	}
}

// checkConfigFile is --check-config: the file is parsed and its policies
// built against the flags (with an in-memory store, so nothing is opened),
// as a start or a SIGHUP would.
func checkConfigFile(cmd *cobra.Command, f serveFlags) error {
	if f.upstream == "" {
		f.upstream = "http://upstream.invalid"
	}
	err := checkServeFlags(f)
	var target *url.URL
	if err == nil {
		target, err = parseUpstream(f)
	}
	var routes []route
	if err == nil {
		routes, err = readConfig(f.checkConfig)
	}
	if err == nil {
		err = buildForCheck(f, target, routes)
	}
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return errors.New("serve: --check-config: the file is refused")
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d routes\n", f.checkConfig, len(routes))
	return nil
}

func buildForCheck(f serveFlags, target *url.URL, routes []route) error {
	s, err := memstore.New()
	if err != nil {
		return err
	}
	defer s.Close()
	trusted, err := parseTrustedProxies(f.trustedProxies)
	if err != nil {
		return err
	}
	g, err := newGateway(f, slog.New(slog.DiscardHandler), target, s, http.DefaultTransport, trusted.set, nil)
	if err != nil {
		return err
	}
	_, err = g.build(f.checkConfig, routes)
	return err
}
