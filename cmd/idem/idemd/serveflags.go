package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

var errFlag = errors.New("invalid flag")

// checkServeFlags rejects values that would make idem serve run without a
// bound it relies on (a zero timeout is no timeout), or with a meaningless
// one. Each error names its flag.
func checkServeFlags(f serveFlags) error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%w --%s %v: must be positive", errFlag, name, d))
		}
	}
	notNegative := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%w --%s %v: must not be negative", errFlag, name, d))
		}
	}
	positive("ttl", f.ttl)
	positive("lease", f.lease)
	notNegative("wait", f.wait)
	notNegative("drain", f.drain)
	notNegative("handler-timeout", f.handlerTimeout)
	positive("read-header-timeout", f.readHeaderTimeout)
	positive("read-timeout", f.readTimeout)
	positive("idle-timeout", f.idleTimeout)
	positive("body-timeout", f.bodyTimeout)
	positive("write-timeout", f.writeTimeout)
	positive("store-timeout", f.storeTimeout)
	positive("snapshot-every", f.snapshotEvery)
	if f.maxBody <= 0 {
		errs = append(errs, fmt.Errorf("%w --max-body %d: must be positive", errFlag, f.maxBody))
	}
	if f.maxResponse <= 0 {
		errs = append(errs, fmt.Errorf("%w --max-response %d: must be positive", errFlag, f.maxResponse))
	}
	if f.maxBuffered <= f.maxBody {
		errs = append(errs, fmt.Errorf("%w --max-buffered %d: must exceed --max-body %d", errFlag, f.maxBuffered, f.maxBody))
	}
	if f.storeCheck != "fail" && f.storeCheck != "warn" {
		errs = append(errs, fmt.Errorf("%w --store-check %q: want fail or warn", errFlag, f.storeCheck))
	}
	if f.scopeHeader != "" && f.scopeCookie != "" {
		errs = append(errs, fmt.Errorf("%w --scope-header and --scope-cookie: choose one", errFlag))
	}
	for _, m := range strings.Split(f.methods, ",") {
		if strings.TrimSpace(m) == "" {
			errs = append(errs, fmt.Errorf("%w --methods %q: empty method", errFlag, f.methods))
			break
		}
	}
	return errors.Join(errs...)
}

// addLimitFlags declares the timeouts and bounds of idem serve.
func addLimitFlags(fl *pflag.FlagSet, f *serveFlags) {
	durationVar(fl, &f.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send its request headers")
	durationVar(fl, &f.readTimeout, "read-timeout", 60*time.Second, "time a client has to send its whole request, headers and body (every request)")
	durationVar(fl, &f.bodyTimeout, "body-timeout", 30*time.Second, "time a keyed request's body has to arrive once the proxy reads it (later: 408)")
	durationVar(fl, &f.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection stays open")
	durationVar(fl, &f.writeTimeout, "write-timeout", 30*time.Second, "bound on each write of a keyed response to a client that stopped reading (the response is still stored)")
	durationVar(fl, &f.storeTimeout, "store-timeout", 5*time.Second, "bound on each key-store call, and on the start-up store check")
	durationVar(fl, &f.handlerTimeout, "handler-timeout", 0, "bound on a keyed request's upstream call (later: 504, key released) (0: none besides the lease, which is renewed while the upstream works)")
	fl.Int64Var(&f.maxBuffered, "max-buffered", 128<<20, "request bytes all keyed requests may buffer at once (beyond: 503 with Retry-After)")
	fl.StringVar(&f.storeCheck, "store-check", "fail", "at start-up, if the store does not answer: fail (exit), or warn (log, start, /readyz unready)")
}

// addGatewayFlags declares the flags of idem serve as a gateway: the
// per-route --config file, TLS to clients and to the upstream, and the
// proxies whose forwarding headers are trusted.
func addGatewayFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.config, "config", "", "YAML file of per-route policies (the flags are the defaults); re-read on SIGHUP")
	fl.StringVar(&f.checkConfig, "check-config", "", "validate this --config file against the flags, print the errors and exit (non-zero if any)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS (and HTTP/2) with this PEM certificate chain; re-read on SIGHUP")
	fl.StringVar(&f.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	fl.BoolVar(&f.h2c, "h2c", false, "also accept HTTP/2 without TLS (prior knowledge), for a TLS-terminating load balancer that speaks HTTP/2 to its backends")
	fl.StringVar(&f.trustedProxies, "trusted-proxies", "", "comma-separated CIDRs or addresses whose X-Forwarded-* and Forwarded headers are kept and extended (others': dropped and replaced)")
	fl.StringVar(&f.upstreamCA, "upstream-ca", "", "PEM file of the CA certificates an https:// upstream is verified with (instead of the system roots)")
	fl.StringVar(&f.upstreamCert, "upstream-cert", "", "PEM client certificate presented to the upstream; re-read on SIGHUP")
	fl.StringVar(&f.upstreamKey, "upstream-key", "", "the PEM private key of --upstream-cert")
}

// flagDuration is a duration flag that takes the --config file's syntax
// (parseDuration): --ttl 7d as well as --ttl 168h.
type flagDuration struct{ d *time.Duration }

// String is "0" for zero, which pflag's help takes for no default.
func (f flagDuration) String() string {
	if f.d == nil || *f.d == 0 {
		return "0"
	}
	return f.d.String()
}

func (f flagDuration) Set(s string) error {
	v, err := parseDuration(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*f.d = v
	return nil
}

func (flagDuration) Type() string { return "duration" }

// durationVar is pflag's DurationVar with days allowed ("7d", "1d12h").
func durationVar(fl *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fl.Var(flagDuration{p}, name, usage)
}
