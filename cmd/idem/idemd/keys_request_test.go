package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore"
)

// keysConfig is a gateway's --config file whose routes scope keys three
// ways.
const keysConfig = `routes:
  - pattern: POST /v1/charges
    scope:
      header: X-Account-Id
  - pattern: POST /v1/orders/{id}
    scope: {cookie: session}
  - pattern: /v1/search/
    pass-through: true
`

// httpStoreKey is the store key idemhttp derives for a request with the
// Idempotency-Key key and headers hdr ("Name", "value", …) under opts.
func httpStoreKey(t *testing.T, s keystore.Store, key string, opts []idemhttp.Option, hdr ...string) (string, *idemhttp.Middleware) {
	t.Helper()
	m, err := idemhttp.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	k, err := m.StoreKey(clientRequest("/", nil, key, hdr...))
	if err != nil {
		t.Fatal(err)
	}
	return k, m
}

// clientRequest is a client's POST to target with the Idempotency-Key key
// and headers hdr ("Name", "value", …).
func clientRequest(target string, body io.Reader, key string, hdr ...string) *http.Request {
	r := httptest.NewRequest("POST", target, body)
	r.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

// storeDone passes a client's request (as clientRequest) through m to a
// handler that answers 201, so that its key is done as the gateway writes
// it.
func storeDone(t *testing.T, m *idemhttp.Middleware, target, key string, hdr ...string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := clientRequest(target, strings.NewReader("x"), key, hdr...)
	m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })).ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("middleware: %d", rec.Code)
	}
}

// Issue 28 item 5: idem keys names a key by the client's request under the
// scope of the route of the gateway's --config file (by pattern, or by the
// request as the gateway matches it); show, release and forget take
// --idempotency-key; a missing principal says which header to pass.
func TestKeysByClientRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	storeURL := "sqlite:" + filepath.Join(dir, "keys.db")
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile(t, cfg, keysConfig)
	spec, _ := parseStoreSpec(storeURL)
	opened, err := openStore(ctx, spec, keystore.DefaultMaxResultSize)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.close()
	s := opened.Store
	in, _ := keystore.As[keystore.Inspector](s)
	idem := func(args ...string) (string, string, bool) {
		return runIdem(t, append([]string{"keys", "--store", storeURL}, args...)...)
	}
	showKey := func(args ...string) keyView {
		t.Helper()
		out, stderr, ok := idem(append([]string{"show", "-o", "json"}, args...)...)
		var v keyView
		if !ok || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("keys show %v: %q %q", args, out, stderr)
		}
		return v
	}

	// A done key of the charges route, written as the gateway writes it.
	account := []idemhttp.Option{idemhttp.WithScopeHeader("X-Account-Id")}
	charge, m := httpStoreKey(t, s, `"order-1"`, account, "X-Account-Id", "a1")
	if tokenForm, _ := httpStoreKey(t, s, "order-1", account, "X-Account-Id", "a1"); tokenForm != charge {
		t.Fatalf("the sf-string and token forms of one key differ: %s %s", charge, tokenForm)
	}
	storeDone(t, m, "/v1/charges", `"order-1"`, "X-Account-Id", "a1")
	route := []string{"--config", cfg, "--route", "POST /v1/charges"}
	for _, key := range []string{`"order-1"`, "order-1"} {
		if v := showKey(append([]string{"--idempotency-key", key, "-H", "X-Account-Id: a1"}, route...)...); v.Key != charge || v.HTTP == nil || v.HTTP.Status != 201 {
			t.Fatalf("show --idempotency-key %s --route 'POST /v1/charges': %+v, want %s (201)", key, v, charge)
		}
	}
	// A route named by the client's request, and by a cookie principal.
	orderKey, _ := httpStoreKey(t, s, `"o-17"`, []idemhttp.Option{idemhttp.WithScopeCookie("session")}, "Cookie", "session=abc")
	if _, err := s.Reserve(ctx, orderKey, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if v := showKey("--idempotency-key", `"o-17"`, "-H", "Cookie: session=abc", "--config", cfg, "--route", "POST /v1/orders/o-17"); v.Key != orderKey || v.State != "in_progress" {
		t.Fatalf("show with --route 'POST /v1/orders/o-17': %+v, want %s in progress", v, orderKey)
	}

	// Errors that say what to pass.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{append([]string{"show", "--idempotency-key", "order-1"}, route...),
			[]string{"no principal", `route "POST /v1/charges" (` + cfg + ":2)", "X-Account-Id header", "-H 'X-Account-Id: <the value the client sent>'"}},
		{[]string{"show", "--idempotency-key", "order-1"},
			[]string{"no principal", "-H 'Authorization: ", "--config FILE --route 'POST /path'"}},
		{[]string{"show", "--idempotency-key", "order-1", "-H", "Cookie: s=1", "--config", cfg, "--route", "POST /v1/orders/7"},
			[]string{"session cookie", "-H 'Cookie: session="}},
		{[]string{"show", "--idempotency-key", "k", "--config", cfg, "--route", "GET /v1/search/q"}, []string{"pass-through"}},
		{[]string{"show", "--idempotency-key", "k", "--route", "POST /v1/charges"}, []string{"--route needs --config"}},
		{[]string{"show", "KEY", "--config", cfg}, []string{"give --idempotency-key with them"}},
		{[]string{"release", "--token", "1"}, []string{"give either KEY"}},
	} {
		_, stderr, ok := idem(tc.args...)
		for _, w := range tc.want {
			if ok || !strings.Contains(stderr, w) {
				t.Errorf("keys %v: ok %v, stderr %q; want it to say %q", tc.args, ok, stderr, w)
			}
		}
	}

	// release by the client's request, fenced by the token.
	held, _ := httpStoreKey(t, s, `"order-2"`, account, "X-Account-Id", "a1")
	c, err := s.Reserve(ctx, held, nil, time.Hour)
	if err != nil || c.State != keystore.Acquired {
		t.Fatalf("Reserve: %v %v", c.State, err)
	}
	byRequest := append([]string{"--idempotency-key", `"order-2"`, "-H", "X-Account-Id: a1"}, route...)
	if _, stderr, ok := idem(append([]string{"release", "--token", strconv.FormatUint(c.Token+1, 10)}, byRequest...)...); ok || !strings.Contains(stderr, "refused") {
		t.Fatalf("release --idempotency-key with a stale token: ok %v %q", ok, stderr)
	}
	if out, stderr, ok := idem(append([]string{"release", "--token", strconv.FormatUint(c.Token, 10)}, byRequest...)...); !ok || !strings.Contains(out, "released "+held) {
		t.Fatalf("release --idempotency-key: %q %q", out, stderr)
	}
	if _, err := in.Inspect(ctx, held); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("after release: %v, want not found", err)
	}
	// forget by the client's request.
	if out, stderr, ok := idem(append([]string{"forget", "--idempotency-key", "order-1", "-H", "X-Account-Id: a1"}, route...)...); !ok || !strings.Contains(out, "forgot "+charge) {
		t.Fatalf("forget --idempotency-key: %q %q", out, stderr)
	}
	if _, err := in.Inspect(ctx, charge); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("after forget: %v, want not found", err)
	}
	// list says why the keys are digests, and how to find one.
	if out, stderr, ok := idem("list"); !ok || !strings.Contains(out, orderKey) || !strings.Contains(stderr, "digest") || !strings.Contains(stderr, "--idempotency-key") {
		t.Fatalf("list: %q %q", out, stderr)
	}
}

// Issue 28 item 5: idem keys --admin reaches the keys of a running idem
// serve's memory store through its admin API: list, show, release and
// forget, by store key or by the client's request.
func TestKeysAdminMode(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	// A 2 s lease: the released request below notices within a renewal.
	p := startServe(t, up.srv.URL, "memory", "--admin-token-file", tokenFile, "--lease", "2s")
	admin := func(args ...string) (string, string, bool) {
		return runIdem(t, append([]string{"keys", "--admin", p.admin, "--admin-token-file", tokenFile}, args...)...)
	}
	client := []string{"-H", "Authorization: Bearer e2e-client"} // post's principal

	if r := post(t, p.url, "/orders", `"a-1"`, "x"); r.status != 201 {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	out, stderr, ok := admin("list", "-o", "json")
	var v keyView
	if !ok || json.Unmarshal([]byte(out), &v) != nil || v.State != "done" {
		t.Fatalf("keys --admin list: %q %q, want the done key", out, stderr)
	}
	done := v.Key
	out, stderr, ok = admin(append([]string{"show", "-o", "json", "--idempotency-key", `"a-1"`}, client...)...)
	if !ok || json.Unmarshal([]byte(out), &v) != nil || v.Key != done || v.HTTP == nil || v.HTTP.Status != 201 {
		t.Fatalf("keys --admin show --idempotency-key: %q %q, want %s (201)", out, stderr, done)
	}
	if out, stderr, ok := admin(append([]string{"forget", "--idempotency-key", "a-1"}, client...)...); !ok || !strings.Contains(out, "forgot "+done) {
		t.Fatalf("keys --admin forget: %q %q", out, stderr)
	}
	if r := post(t, p.url, "/orders", `"a-1"`, "x"); r.header.Get("Idempotent-Replayed") != "" || up.count("/orders") != 2 {
		t.Fatalf("after forget: replayed=%q executions %d, want a new execution", r.header.Get("Idempotent-Replayed"), up.count("/orders"))
	}

	// An in-progress key released through the API, fenced. /hold runs
	// until its lease is lost: however slow the admin calls below are,
	// the key is still in progress when they run (a 3 s upstream call had
	// ended, and its key was done, when a loaded machine took longer).
	running := make(chan reply, 1)
	go func() { running <- post(t, p.url, "/hold", "slow-1", "x") }()
	waitFor(t, func() bool { return up.count("/hold") > 0 })
	out, stderr, ok = admin("list", "--state", "in_progress", "-o", "json")
	if !ok || json.Unmarshal([]byte(out), &v) != nil || v.Token == 0 {
		t.Fatalf("keys --admin list --state in_progress: %q %q", out, stderr)
	}
	if _, stderr, ok := admin("release", v.Key, "--token", strconv.FormatUint(v.Token+1, 10)); ok || !strings.Contains(stderr, "refused") || !strings.Contains(stderr, "HTTP 409") {
		t.Fatalf("keys --admin release with a stale token: ok %v %q", ok, stderr)
	}
	if out, stderr, ok := admin(append([]string{"release", "--idempotency-key", "slow-1", "--token", strconv.FormatUint(v.Token, 10)}, client...)...); !ok || !strings.Contains(out, "released "+v.Key) {
		t.Fatalf("keys --admin release --idempotency-key: %q %q", out, stderr)
	}
	recv(t, running)
	if _, stderr, ok := admin("show", v.Key); ok || !strings.Contains(stderr, "HTTP 404") {
		t.Fatalf("keys --admin show after release: ok %v %q, want 404", ok, stderr)
	}

	// Refusals that say what to do.
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("wrong-token-wrong-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "--store", "memory", "list"}, "--admin"},
		{[]string{"keys", "--admin", p.admin, "list"}, "--admin needs --admin-token-file"},
		{[]string{"keys", "--admin", p.admin, "--admin-token-file", wrong, "list"}, "HTTP 401"},
		{[]string{"keys", "--admin", p.admin, "--admin-token-file", tokenFile, "--store", "sqlite:x.db", "list"}, "drop --store"},
		{[]string{"keys", "--admin", "127.0.0.1:1", "--admin-token-file", tokenFile, "list"}, "want idem serve's --admin-listen address as a URL"},
	} {
		if _, stderr, ok := runIdem(t, tc.args...); ok || !strings.Contains(stderr, tc.want) {
			t.Errorf("idem %v: ok %v %q; want %q", tc.args, ok, stderr, tc.want)
		}
	}
}
