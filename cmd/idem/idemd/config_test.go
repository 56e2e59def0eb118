package main

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
)

func TestParseConfigRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file string
		line       string // "f.yaml:N:"
		want       string
	}{
		{"unknown field", "routes:\n  - pattern: POST /v1/charges\n    kee: required\n", "f.yaml:3:", `unknown field "kee"`},
		{"unknown top-level field", "routes: []\nroutez: []\n", "f.yaml:2:", `unknown field "routez"`},
		{"pass-through with a required key", "routes:\n  - pattern: /a\n    pass-through: true\n    key: required\n", "f.yaml:4:", "contradicts pass-through"},
		{"pass-through with a ttl", "routes:\n  - pattern: /a\n    pass-through: true\n    ttl: 1h\n", "f.yaml:4:", "ttl: contradicts pass-through"},
		{"anonymous with a scope header", "routes:\n  - pattern: /a\n    scope:\n      header: X-Tenant\n      anonymous: true\n", "f.yaml:3:", "anonymous contradicts header"},
		{"two principals", "routes:\n  - pattern: /a\n    scope: {header: X-Tenant, cookie: s}\n", "f.yaml:3:", "name one of"},
		{"no principal named", "routes:\n  - pattern: /a\n    scope: {}\n", "f.yaml:3:", "names no principal"},
		{"same pattern twice", "routes:\n  - pattern: POST /a\n  - pattern: /b\n  - pattern: POST   /a\n", "f.yaml:4:", "same pattern as the route at line 2"},
		{"invalid pattern", "routes:\n  - pattern: POST /a/{x\n", "f.yaml:2:", "pattern"},
		{"conflicting patterns", "routes:\n  - pattern: /a/{x}/c\n  - pattern: /a/b/{y}\n", "f.yaml:3:", "conflicts"},
		{"negative ttl", "routes:\n  - pattern: /a\n    ttl: -1s\n", "f.yaml:3:", "ttl: -1s must be positive"},
		{"zero lease", "routes:\n  - pattern: /a\n\n    lease: 0s\n", "f.yaml:4:", "lease: 0s must be positive"},
		{"bad duration", "routes:\n  - pattern: /a\n    ttl: soon\n", "f.yaml:2:", "want a Go duration"},
		{"key neither required nor optional", "routes:\n  - pattern: /a\n    key: maybe\n", "f.yaml:3:", "want required or optional"},
		{"method the pattern never lets in", "routes:\n  - pattern: POST /a\n    methods: [PATCH]\n", "f.yaml:3:", "PATCH never reaches"},
		{"empty methods", "routes:\n  - pattern: /a\n    methods: []\n", "f.yaml:3:", "empty list"},
		{"negative max-response", "routes:\n  - pattern: /a\n    max-response: -5\n", "f.yaml:3:", "must be positive"},
		{"missing pattern", "routes:\n  - key: required\n", "f.yaml:2:", "pattern: missing"},
		{"no routes", "routes: []\n", "f.yaml:", "no routes"},
		{"syntax", "routes:\n  - pattern: /a\n   key: x\n", "f.yaml:3:", ""},
		{"wrong type", "routes:\n  - pattern: /a\n    methods: POST\n", "f.yaml:3:", "sequence"},
		{"not a mapping", "hello", "f.yaml:1:", "mapping"},
		{"two key sources", "routes:\n  - pattern: /a\n    key-from: {header: X-GitHub-Delivery, cloudevents: true}\n", "f.yaml:3:", "key-from: name one of"},
		{"no key source", "routes:\n  - pattern: /a\n    key-from: {}\n", "f.yaml:3:", "key-from: name one of"},
		{"bad key header", "routes:\n  - pattern: /a\n    key-from: {header: 'X Delivery'}\n", "f.yaml:3:", "not a header name"},
		{"bad key expression", "routes:\n  - pattern: /a\n\n    key-from: {json: 'detail.['}\n", "f.yaml:4:", "JMESPath expression"},
		{"unknown key source", "routes:\n  - pattern: /a\n    key-from: {query: id}\n", "f.yaml:3:", `unknown field "query"`},
		{"unknown fingerprint", "routes:\n  - pattern: /a\n    fingerprint: canonical\n", "f.yaml:3:", "want raw, json or fields"},
		{"fields with json", "routes:\n  - pattern: /a\n    fingerprint: json\n    fingerprint-fields: [amount]\n", "f.yaml:4:", "contradicts fingerprint: json"},
		{"fields without any", "routes:\n  - pattern: /a\n    fingerprint: fields\n", "f.yaml:", "at least one expression"},
		{"bad field expression", "routes:\n  - pattern: /a\n    fingerprint-fields: [amount, 'customer..id']\n", "f.yaml:3:", "JMESPath expression"},
		{"store-4xx not a bool", "routes:\n  - pattern: /a\n    store-4xx: sometimes\n", "f.yaml:3:", ""},
		{"pass-through with a key source", "routes:\n  - pattern: /a\n    pass-through: true\n    key-from: {cloudevents: true}\n", "f.yaml:4:", "key-from: contradicts pass-through"},
		{"pass-through with store-4xx", "routes:\n  - pattern: /a\n    pass-through: true\n    store-4xx: false\n", "f.yaml:4:", "store-4xx: contradicts pass-through"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig("f.yaml", []byte(tc.file))
			if err == nil || !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tc.line) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want an errConfig at %s saying %q", err, tc.line, tc.want)
			}
		})
	}
}

func TestParseConfigDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	routes, err := parseConfig("f.yaml", []byte(`
routes:
  - pattern: POST /v1/charges
    key: required
    ttl: 1d12h
  - pattern: /v1/orders/
    methods: [post, put]
    scope: {authorization: true}
  - pattern: /v1/search/
    pass-through: true
`))
	if err != nil {
		t.Fatal(err)
	}
	f := serveFlags{ttl: time.Hour, lease: 30 * time.Second, methods: "POST,PATCH", scopeHeader: "X-Tenant", allowAnonymous: true, maxBody: 10, maxResponse: 20}
	base := flagPolicy(f)
	charges, orders, search := base.with(routes[0]), base.with(routes[1]), base.with(routes[2])
	if !charges.required || charges.ttl != 36*time.Hour || charges.lease != 30*time.Second || strings.Join(charges.methods, ",") != "POST" || charges.scopeHeader != "X-Tenant" {
		t.Errorf("charges: %+v (want required, ttl 36h, the flags' lease and scope, the pattern's method)", charges)
	}
	if orders.required || orders.ttl != time.Hour || strings.Join(orders.methods, ",") != "POST,PUT" || orders.scopeHeader != "" || orders.anonymous {
		t.Errorf("orders: %+v (want the flags' ttl, its methods, the Authorization scope replacing the flags' whole)", orders)
	}
	if !search.passThrough {
		t.Errorf("search: %+v", search)
	}
}

// The shipped example passes the same checks as --check-config.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	const path = "../../../docs/examples/idem-serve.yaml"
	routes, err := readConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	f := serveFlags{ttl: 24 * time.Hour, lease: 30 * time.Second, methods: "POST,PATCH", maxBody: 8 << 20, maxResponse: 1 << 20, maxBuffered: 128 << 20,
		bodyTimeout: time.Second, writeTimeout: time.Second, storeTimeout: time.Second, checkConfig: path}
	target, _ := url.Parse("http://upstream.invalid")
	if err := buildForCheck(f, target, routes); err != nil {
		t.Fatal(err)
	}
	byPattern := map[string]route{}
	for _, r := range routes {
		byPattern[r.pattern] = r
	}
	if r := byPattern["POST /v1/charges"]; r.ttl != 24*time.Hour || r.required == nil || !*r.required {
		t.Errorf("charges: %+v", r)
	}
	if r := byPattern["POST /v1/refunds"]; r.ttl != 7*24*time.Hour {
		t.Errorf("refunds: %+v", r)
	}
	if r := byPattern["/v1/search/"]; !r.passThrough {
		t.Errorf("search: %+v", r)
	}
}

// buildPolicies builds a gateway with flags f to target, on a memory
// store closed when the test ends, and the policy set of its routes.
func buildPolicies(t *testing.T, f serveFlags, target *url.URL, routes []route) (*gateway, *policySet) {
	t.Helper()
	g, err := newGateway(f, slog.New(slog.DiscardHandler), target, dbtest.MemStore(t), http.DefaultTransport, trustedProxies(nil).set, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := g.build("f.yaml", routes)
	if err != nil {
		t.Fatal(err)
	}
	return g, ps
}

// Requests get the policy of the route that matches them; where ServeMux
// would redirect, the policy of the route the redirect reaches.
func TestPolicySetMatching(t *testing.T) {
	t.Parallel()
	routes, err := parseConfig("f.yaml", []byte("routes:\n  - pattern: POST /v1/charges\n  - pattern: /v1/search/\n    pass-through: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := serveFlags{ttl: time.Hour, lease: time.Second, methods: "POST", maxBody: 10, maxResponse: 20, maxBuffered: 100,
		bodyTimeout: time.Second, writeTimeout: time.Second, storeTimeout: time.Second}
	target, _ := url.Parse("http://upstream.invalid")
	g, ps := buildPolicies(t, f, target, routes)
	charges := ps.handler(httptest.NewRequest("POST", "/v1/charges", nil))
	for _, tc := range []struct {
		method, path string
		want         http.Handler
	}{
		{"POST", "/v1/search/x", g.plain}, {"POST", "/v1/search", g.plain}, {"GET", "/v1/search/../search/", g.plain},
		{"POST", "/v1//charges", charges}, {"GET", "/v1/charges", ps.def}, {"POST", "/other", ps.def},
	} {
		if got := ps.handler(httptest.NewRequest(tc.method, tc.path, nil)); got != tc.want {
			t.Errorf("%s %s: got %T %p, want %T %p", tc.method, tc.path, got, got, tc.want, tc.want)
		}
	}
	if charges == ps.def || charges == g.plain {
		t.Fatal("the charges route has no handler of its own")
	}
}

func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	trusted, err := parseTrustedProxies("127.0.0.1/32, ::1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseTrustedProxies("10.0.0.0/33"); !errors.Is(err, errFlag) {
		t.Errorf("bad CIDR: %v", err)
	}
	in := func(remote string, tlsOn bool) *http.Request {
		r := httptest.NewRequest("POST", "http://api.example:8443/x", nil)
		r.RemoteAddr = remote
		if tlsOn {
			r.TLS = &tls.ConnectionState{}
		}
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		r.Header.Set("X-Forwarded-Proto", "https")
		r.Header.Set("X-Forwarded-Host", "shop.example")
		r.Header.Set("Forwarded", "for=203.0.113.7;proto=https")
		return r
	}
	for _, tc := range []struct {
		name, remote          string
		tls                   bool
		xff, proto, host, fwd string
	}{
		{"trusted v4: kept and extended", "127.0.0.1:5000", false, "203.0.113.7, 127.0.0.1", "https", "shop.example",
			`for=203.0.113.7;proto=https, for=127.0.0.1;host="api.example:8443";proto=http`},
		{"trusted v6", "[::1]:5000", true, "203.0.113.7, ::1", "https", "shop.example",
			`for=203.0.113.7;proto=https, for="[::1]";host="api.example:8443";proto=https`},
		{"untrusted: dropped and replaced", "192.0.2.9:5000", true, "192.0.2.9", "https", "api.example:8443",
			`for=192.0.2.9;host="api.example:8443";proto=https`},
		{"untrusted over plain HTTP", "192.0.2.9:5000", false, "192.0.2.9", "http", "api.example:8443",
			`for=192.0.2.9;host="api.example:8443";proto=http`},
	} {
		out := http.Header{}
		trusted.set(in(tc.remote, tc.tls), out)
		if out.Get("X-Forwarded-For") != tc.xff || out.Get("X-Forwarded-Proto") != tc.proto || out.Get("X-Forwarded-Host") != tc.host || out.Get("Forwarded") != tc.fwd {
			t.Errorf("%s: got %v", tc.name, out)
		}
	}
	out := http.Header{}
	trustedProxies(nil).set(in("127.0.0.1:1", false), out)
	if out.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Errorf("nothing trusted: %v", out)
	}
}

// FuzzParseConfig: the parser never panics, what it accepts can be
// registered in a ServeMux, garbage is an errConfig, and no file the shape
// check accepts nests deeper than maxConfigDepth.
func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile("../../../docs/examples/idem-serve.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("routes:\n  - pattern: POST /v1/charges\n    key: required\n    ttl: 24h\n"))
	f.Add([]byte("routes:\n  - pattern: /a\n    pass-through: true\n    key: required\n"))
	f.Add([]byte("routes:\n  - {pattern: '/a/{x}', scope: {cookie: s, anonymous: true}, methods: [POST]}\n"))
	f.Add([]byte("routes: [&a {pattern: /a}, *a]\n"))
	f.Add([]byte("routes:\n  - pattern: POST /hooks/github\n    key-from: {header: X-GitHub-Delivery}\n    store-4xx: false\n"))
	f.Add([]byte("routes:\n  - pattern: POST /events\n    key-from: {cloudevents: true}\n    fingerprint: json\n"))
	f.Add([]byte("routes:\n  - pattern: POST /pay\n    key-from: {json: 'detail.id'}\n    fingerprint-fields: [amount, currency, customer.id]\n"))
	f.Add([]byte("routes:\n  - pattern: POST /q\n    quota: {principal-keys: 100, principal-bytes: 10MiB, keys: 10000, bytes: 1GiB}\n"))
	f.Add([]byte("routes:\n  - pattern: POST /q\n    quota: {keys: -1, bytes: 9XB}\n"))
	f.Add([]byte("\x00\xff{["))
	// Hostile shapes (issue 28): deep nesting, and an alias bomb.
	f.Add([]byte("routes: " + strings.Repeat("[", 200)))
	f.Add([]byte("routes:\n  - pattern: /a\n    scope: " + strings.Repeat("{a: ", 200)))
	f.Add([]byte("routes:\n" + strings.Repeat("  - ", 100) + "x\n"))
	f.Add([]byte("routes:\n  - pattern: |\n      [[[[\n    methods: ['[[', \"{{\"] # [[\n"))
	laughs := "routes:\n  - pattern: /a\n    methods: &a [x,x,x,x,x,x,x,x,x,x]\n"
	for i, prev := 0, "a"; i < 8; i++ {
		n := string(rune('b' + i))
		laughs += "    fingerprint-headers: &" + n + " [" + strings.Repeat("*"+prev+",", 9) + "*" + prev + "]\n"
		prev = n
	}
	f.Add([]byte(laughs))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The resource bound: what the shape check lets through nests no
		// deeper than its limit in the parser's own tree, so the parser's
		// memory (quadratic in the depth) stays bounded.
		if checkConfigShape("f.yaml", data) == nil {
			if d := yamlDepth(data); d > maxConfigDepth {
				t.Fatalf("the shape check let through a file %d levels deep", d)
			}
		}
		routes, err := parseConfig("f.yaml", data)
		if err != nil {
			if !errors.Is(err, errConfig) {
				t.Fatalf("error not wrapping errConfig: %v", err)
			}
			return
		}
		if len(routes) == 0 {
			t.Fatal("accepted a file with no routes")
		}
		mux := http.NewServeMux()
		for _, r := range routes {
			if err := register(mux, r.pattern, http.NotFoundHandler()); err != nil {
				t.Fatalf("accepted pattern %q that does not register: %v", r.pattern, err)
			}
			if r.ttl < 0 || r.lease < 0 || r.maxBody < 0 || r.maxResponse < 0 {
				t.Fatalf("accepted a negative value: %+v", r)
			}
			if r.passThrough && (r.required != nil || r.methods != nil || r.scope != nil) {
				t.Fatalf("accepted a contradictory pass-through route: %+v", r)
			}
		}
	})
}

// Issue 28: the duration flags take the config file's syntax, days
// included, and refuse what it refuses with the same message.
func TestDurationFlagsTakeDays(t *testing.T) {
	t.Parallel()
	serve := newServe()
	if err := serve.ParseFlags([]string{"--ttl", "7d", "--lease", "1d12h", "--wait", "90s", "--drain", "0d", "--store-timeout", "2s"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"ttl": "168h0m0s", "lease": "36h0m0s", "wait": "1m30s", "drain": "0", "store-timeout": "2s", "idle-timeout": "2m0s"} {
		if got := serve.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s: %s, want %s", name, got, want)
		}
	}
	if err := newServe().ParseFlags([]string{"--ttl", "soon"}); err == nil || !strings.Contains(err.Error(), "want a Go duration such as 90s or 24h, or days such as 7d") {
		t.Errorf("--ttl soon: %v", err)
	}
	for _, args := range [][]string{
		{"inbox", "migrate-layout", "--retention", "30d"},
		{"plan", "--horizon", "7d"},
		{"chaos", "--timeout", "1d"},
	} {
		cmd, rest, err := newRoot(io.Discard, io.Discard).Find(args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("idem %v: %v", args, err)
		}
	}
	out, err := run(t, "serve", "--ttl", "7d", "--check-config", "../../../docs/examples/idem-serve.yaml")
	if err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("serve --ttl 7d --check-config: %v %s", err, out)
	}
}
