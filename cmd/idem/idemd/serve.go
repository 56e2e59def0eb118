package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/idem-go/idem/idemhttp/idemhttpprom"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/keystore/keystoreprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

type serveFlags struct {
	listen, admin, upstream, store string
	ttl, lease, wait, drain        time.Duration
	snapshotEvery                  time.Duration // --store memory:PATH only
	requireKey, strictKey, store5x bool
	methods                        string
	scopeHeader, scopeCookie       string
	allowAnonymous                 bool
	maxBody, maxBuffered           int64
	maxResponse                    int
	readHeaderTimeout, readTimeout time.Duration
	bodyTimeout, idleTimeout       time.Duration
	writeTimeout, storeTimeout     time.Duration
	handlerTimeout                 time.Duration // 0: none besides the lease
	storeCheck                     string
	adminTokenFile                 string
	// the gateway: per-route policies, TLS, forwarding (serveflags.go)
	config, checkConfig       string
	tlsCert, tlsKey           string
	trustedProxies            string
	upstreamCA                string
	upstreamCert, upstreamKey string
	h2c                       bool
	otlp                      otlpFlags // tracing (tracing.go)
}

func newServe() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve --upstream URL",
		Short: "Run an Idempotency-Key proxy in front of an HTTP API",
		Long: `serve is a reverse proxy that gives any HTTP API Idempotency-Key semantics
(draft-ietf-httpapi-idempotency-key-header): the first POST or PATCH with a key
is forwarded and its response stored; retries with the same key get the stored
response with Idempotent-Replayed: true; the same key with another request is
422; a key still in progress is 409 with Retry-After. Several proxies sharing
one store (a SQLite file, PostgreSQL or Redis) behave as one.

On SIGTERM or SIGINT it stops accepting requests, lets the ones in flight finish
for --drain, then aborts the rest, releasing their keys so that retries execute.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve the proxy on")
	fl.StringVar(&f.admin, "admin-listen", "", "address for /metrics, /healthz and /readyz (empty: off)")
	fl.StringVar(&f.adminTokenFile, "admin-token-file", "", "serve the key API (/admin/keys: list, show, fenced release, forget) on --admin-listen, to requests with Authorization: Bearer <this file's token>, and the operator page (/admin/ui: sign in with the token) (empty: off)")
	fl.StringVar(&f.upstream, "upstream", "", "URL of the API to proxy to (required)")
	fl.StringVar(&f.store, "store", "sqlite:idem.db", "key store: "+storeForms)
	durationVar(fl, &f.snapshotEvery, "snapshot-every", memorySnapshotEvery, "with --store memory:PATH, how often the snapshot is saved besides at shutdown: a crash (SIGKILL, OOM) loses the keys of at most this long")
	durationVar(fl, &f.ttl, "ttl", 24*time.Hour, "how long completed responses are replayed (Go durations, and days: 7d, 1d12h, as in --config)")
	durationVar(fl, &f.lease, "lease", 30*time.Second, "how long a request holds its key: renewed every third while the upstream works (a lost lease cancels the call), so it is how long a crashed proxy keeps its keys")
	durationVar(fl, &f.wait, "wait", 0, "wait up to this long for an in-progress request instead of answering 409")
	durationVar(fl, &f.drain, "drain", 30*time.Second, "how long SIGTERM lets in-flight requests finish")
	fl.BoolVar(&f.requireKey, "require-key", false, "answer 400 to keyed methods without an Idempotency-Key")
	fl.BoolVar(&f.strictKey, "strict-key", false, "accept only the Structured Field String form of the key")
	fl.BoolVar(&f.store5x, "store-5xx", false, "store and replay 5xx responses (Stripe's behaviour) instead of releasing the key")
	fl.StringVar(&f.methods, "methods", "POST,PATCH", "comma-separated methods that use keys")
	fl.StringVar(&f.scopeHeader, "scope-header", "", "scope keys by this header (default: a hash of Authorization)")
	fl.StringVar(&f.scopeCookie, "scope-cookie", "", "scope keys by a hash of this cookie, else of Authorization")
	fl.BoolVar(&f.allowAnonymous, "allow-anonymous", false, "let keyed requests without a principal share one scope (default: 400 no-principal)")
	fl.Int64Var(&f.maxBody, "max-body", 8<<20, "largest keyed request body, bytes (larger: 413)")
	fl.IntVar(&f.maxResponse, "max-response", 1<<20, "largest response stored for replay, bytes")
	addLimitFlags(fl, &f)
	addGatewayFlags(fl, &f)
	addTracingFlags(fl, &f.otlp)
	return cmd
}

func runServe(cmd *cobra.Command, f serveFlags) error {
	ctx := cmd.Context()
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	if f.checkConfig != "" {
		return checkConfigFile(cmd, f)
	}
	if f.upstream == "" {
		return errors.New("serve: --upstream is required")
	}
	if err := checkServeFlags(f); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var adminToken []byte
	if f.adminTokenFile != "" {
		if f.admin == "" {
			return errors.New("serve: --admin-token-file needs --admin-listen")
		}
		tok, err := readAdminToken(f.adminTokenFile)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		adminToken = tok
	}
	target, err := parseUpstream(f)
	if err != nil {
		return err
	}
	tls, err := loadTLS(f)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var routes []route
	if f.config != "" {
		if routes, err = readConfig(f.config); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	spec, err := parseStoreSpec(f.store)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	spec.every = f.snapshotEvery
	store, err := openStore(ctx, spec, f.maxResponse+64<<10)
	if err != nil {
		return fmt.Errorf("serve: open store: %w", err)
	}
	defer store.close()
	if err := startupStoreCheck(ctx, log, store, f); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hooks, err := idemhttpprom.New(reg)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if f.admin != "" {
		// /metrics is served: count the key store's calls too
		// (idem_keystore_*, labelled with the store's kind).
		km, err := keystoreprom.New(reg, keystoreprom.WithConstLabels(prometheus.Labels{"store": spec.kind}))
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		if store.Store, err = km.Wrap(store.Store); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	tracer, stopTracing, err := startTracing(f.otlp, log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer stopTracing() // before the store closes: flushes the last spans
	store.Store = idemotel.WrapStore(store.Store, tracer)
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_serve_reloads_total",
		Help: "SIGHUP reloads of the --config file and the certificates, by what and result (ok, error: the previous one stays).",
	}, []string{"what", "result"})
	reg.MustRegister(reloads)
	g, err := newGateway(f, log, target, store.Store, tls.upstream, tls.trusted.set, hooks)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	g.tracer = tracer
	if adminToken != nil {
		g.held = newHeldKeys() // the operator page shows the age and route of the keys this process holds
	}
	ps, err := g.build(f.config, routes)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	g.use(ps)
	// Before the listeners: once the proxy answers, a SIGHUP reloads and
	// never ends the process.
	stopHUP := onSIGHUP(func() { reload(g, f, tls, log, reloads) })
	defer stopHUP()

	var inflight sync.WaitGroup
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			g.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: f.readHeaderTimeout,
		ReadTimeout:       f.readTimeout,
		IdleTimeout:       f.idleTimeout,
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	errc := make(chan error, 2)
	if f.h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	if tls.server != nil {
		srv.TLSConfig = serverTLS(tls.server)
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}

	var admin *http.Server
	if f.admin != "" {
		aln, err := net.Listen("tcp", f.admin)
		if err != nil {
			srv.Close()
			return fmt.Errorf("serve: admin: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
		if adminToken != nil {
			mux.Handle("/admin/", adminKeys(store.Store, adminToken, log))
			page := newAdminPage(store.Store, adminToken, g.outcomes, g.held, log)
			mux.Handle(pagePath, page)
			mux.Handle(pagePath+"/", page)
		}
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := store.ping(pctx); err != nil {
				http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
		})
		admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: f.idleTimeout}
		go func() { errc <- admin.Serve(aln) }()
		log.Info("admin listening", "addr", aln.Addr().String())
	}
	log.Info("idem serve listening", "addr", ln.Addr().String(), "upstream", target.Redacted(), "store", spec.kind,
		"tls", tls.server != nil, "routes", ps.routes)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "drain", f.drain)
	dctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	if admin != nil {
		_ = admin.Shutdown(dctx)
	}
	if err := srv.Shutdown(dctx); err != nil {
		log.Warn("drain time over: aborting in-flight upstream calls and releasing their keys", "err", err)
		g.abort()
		done := make(chan struct{})
		go func() { inflight.Wait(); close(done) }()
		select {
		case <-done:
			// The handlers returned; let the server flush their responses.
			fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = srv.Shutdown(fctx)
			fcancel()
		case <-time.After(10 * time.Second):
			log.Error("in-flight requests did not finish; their keys stay in progress until the lease ends")
		}
		srv.Close()
	}
	return nil
}
