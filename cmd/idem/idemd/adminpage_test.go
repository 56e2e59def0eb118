package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// pageClient talks to the operator page at base as a browser would: it
// keeps the session cookie it is given and never follows redirects.
type pageClient struct {
	t      *testing.T
	base   string
	c      *http.Client
	cookie *http.Cookie
	bearer string
}

func newPageClient(t *testing.T, srv *httptest.Server) *pageClient {
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Timeout = 10 * time.Second
	return &pageClient{t: t, base: srv.URL, c: c}
}

func (pc *pageClient) do(method, path string, form url.Values) (*http.Response, string) {
	pc.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, pc.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if pc.cookie != nil {
		req.AddCookie(pc.cookie)
	}
	if pc.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+pc.bearer)
	}
	res, err := pc.c.Do(req)
	if err != nil {
		pc.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// login signs in with token and keeps the cookie; it returns the response.
func (pc *pageClient) login(token string) *http.Response {
	pc.t.Helper()
	res, _ := pc.do("POST", pagePath+"/login", url.Values{"token": {token}})
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			pc.cookie = c
		}
	}
	return res
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]*)"`)

// csrf is the CSRF token of the page pc is signed in to.
func (pc *pageClient) csrf() string {
	pc.t.Helper()
	res, body := pc.do("GET", pagePath, nil)
	m := csrfField.FindStringSubmatch(body)
	if res.StatusCode != 200 || m == nil || m[1] == "" {
		pc.t.Fatalf("page: %d, no CSRF token in\n%s", res.StatusCode, body)
	}
	return m[1]
}

// stuckKey reserves key twice (the first lease released) and returns the
// stale token and the current one.
func stuckKey(t *testing.T, s keystore.Store, key string) (stale, cur uint64) {
	t.Helper()
	ctx := context.Background()
	old, err := s.Reserve(ctx, key, nil, time.Hour)
	if err != nil || s.Release(ctx, old) != nil {
		t.Fatalf("Reserve %q: %v", key, err)
	}
	c, err := s.Reserve(ctx, key, nil, time.Hour)
	if err != nil || c.State != keystore.Acquired || c.Token == old.Token {
		t.Fatalf("Reserve %q: %v %v", key, c, err)
	}
	return old.Token, c.Token
}

// held fails t unless key is still in progress.
func held(t *testing.T, s keystore.Store, key, after string) {
	t.Helper()
	in, _ := keystore.As[keystore.Inspector](s)
	if k, err := in.Inspect(context.Background(), key); err != nil || k.State != keystore.InProgress {
		t.Fatalf("after %s, %q is %v %v: want still in progress", after, key, k.State, err)
	}
}

func newPageServer(t *testing.T, s keystore.Store, tlsOn bool) (*adminPage, *httptest.Server) {
	p := newAdminPage(s, []byte(testAdminToken), newOutcomeLog(), newHeldKeys(), slog.New(slog.DiscardHandler))
	var srv *httptest.Server
	if tlsOn {
		srv = httptest.NewTLSServer(p)
	} else {
		srv = httptest.NewServer(p)
	}
	t.Cleanup(srv.Close)
	return p, srv
}

func TestAdminPageAuth(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	stale, cur := stuckKey(t, s, "stuck/1")
	p, srv := newPageServer(t, s, false)
	var logs syncBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	anon := newPageClient(t, srv)

	// Not signed in, a wrong bearer token, a wrong sign-in: 401, the key
	// not disclosed, no cookie.
	if res, body := anon.do("GET", pagePath, nil); res.StatusCode != 401 || strings.Contains(body, "stuck/1") || !strings.Contains(body, `name="token"`) {
		t.Fatalf("page without a session: %d\n%s", res.StatusCode, body)
	}
	wrongBearer := newPageClient(t, srv)
	wrongBearer.bearer = testAdminToken + "x"
	if res, body := wrongBearer.do("GET", pagePath, nil); res.StatusCode != 401 || strings.Contains(body, "stuck/1") {
		t.Fatalf("page with a wrong bearer token: %d", res.StatusCode)
	}
	for _, tok := range []string{"", "wrong", testAdminToken[1:], testAdminToken + "x"} {
		if res := anon.login(tok); res.StatusCode != 401 || anon.cookie != nil {
			t.Fatalf("sign-in with %q: %d, cookie %v: want 401 and none", tok, res.StatusCode, anon.cookie)
		}
	}
	// Every POST is refused without a session, and changes nothing.
	rel := url.Values{"key": {"stuck/1"}, "token": {strconv.FormatUint(cur, 10)}}
	for _, path := range []string{"/release", "/logout"} {
		if res, _ := anon.do("POST", pagePath+path, rel); res.StatusCode != 401 {
			t.Fatalf("POST %s without a session: %d, want 401", path, res.StatusCode)
		}
	}
	held(t, s, "stuck/1", "POSTs without a session")

	// The right token: a cookie that is HttpOnly, SameSite=Strict, not
	// the token, not Secure over plain HTTP.
	pc := newPageClient(t, srv)
	res := pc.login(" " + testAdminToken + "\n")
	c := pc.cookie
	if res.StatusCode != http.StatusSeeOther || c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != pagePath {
		t.Fatalf("sign-in: %d, cookie %+v", res.StatusCode, c)
	}
	if strings.Contains(c.Value, testAdminToken) || strings.Contains(c.Value, url.QueryEscape(testAdminToken)) {
		t.Fatalf("the cookie carries the token: %q", c.Value)
	}
	res, body := pc.do("GET", pagePath, nil)
	if res.StatusCode != 200 || !strings.Contains(body, "stuck/1") || !strings.Contains(body, strconv.FormatUint(cur, 10)) {
		t.Fatalf("page: %d\n%s", res.StatusCode, body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers: %v", res.Header)
	}
	csrf := pc.csrf()

	// POSTs with the cookie but without, or with another session's, CSRF
	// token: 403, nothing changed.
	other := newPageClient(t, srv)
	other.login(testAdminToken)
	otherCSRF := other.csrf()
	if otherCSRF == csrf {
		t.Fatal("two sessions share a CSRF token")
	}
	for _, bad := range []string{"", "x", otherCSRF, csrf[:len(csrf)-1]} {
		f := url.Values{"key": {"stuck/1"}, "token": {strconv.FormatUint(cur, 10)}, "csrf": {bad}}
		if res, body := pc.do("POST", pagePath+"/release", f); res.StatusCode != 403 || !strings.Contains(body, "CSRF") {
			t.Fatalf("release with CSRF %q: %d, want 403", bad, res.StatusCode)
		}
	}
	held(t, s, "stuck/1", "releases without a valid CSRF token")

	// A stale token: 409, refused, nothing changed.
	f := url.Values{"key": {"stuck/1"}, "token": {strconv.FormatUint(stale, 10)}, "csrf": {csrf}}
	if res, body := pc.do("POST", pagePath+"/release", f); res.StatusCode != 409 || !strings.Contains(body, "refused") {
		t.Fatalf("release with a stale token: %d\n%s", res.StatusCode, body)
	}
	held(t, s, "stuck/1", "a stale release")
	f.Set("token", "0")
	if res, _ := pc.do("POST", pagePath+"/release", f); res.StatusCode != 400 {
		t.Fatalf("release with token 0: %d, want 400", res.StatusCode)
	}
	held(t, s, "stuck/1", "a release with token 0")

	// The holder's token: released.
	f.Set("token", strconv.FormatUint(cur, 10))
	if res, body := pc.do("POST", pagePath+"/release", f); res.StatusCode != 200 || !strings.Contains(body, "Released stuck/1") || strings.Contains(body, `<code>stuck/1</code>`) {
		t.Fatalf("release: %d\n%s", res.StatusCode, body)
	}
	if c, _ := s.Reserve(context.Background(), "stuck/1", nil, time.Hour); c.State != keystore.Acquired {
		t.Fatalf("after the release the key is %v, want free", c.State)
	}
	// Logged as the key API logs its releases; the refused ones are not.
	if l := logs.String(); strings.Count(l, "key released by an operator") != 1 || !strings.Contains(l, "key=stuck/1 token="+strconv.FormatUint(cur, 10)+" via=page") {
		t.Fatalf("release log:\n%s", l)
	}

	// Bearer: no CSRF token needed, since no browser sends the header by
	// itself.
	_, cur2 := stuckKey(t, s, "stuck/2")
	api := newPageClient(t, srv)
	api.bearer = testAdminToken
	if res, body := api.do("POST", pagePath+"/release", url.Values{"key": {"stuck/2"}, "token": {strconv.FormatUint(cur2, 10)}}); res.StatusCode != 200 {
		t.Fatalf("bearer release: %d\n%s", res.StatusCode, body)
	}

	// Sign out: the cookie is cleared.
	res, _ = pc.do("POST", pagePath+"/logout", url.Values{"csrf": {csrf}})
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || res.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("logout: %d %v", res.StatusCode, res.Cookies())
	}
}

// TestAdminPageSessions: a session cookie is void when forged, signed by
// another token, or expired.
func TestAdminPageSessions(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	p, srv := newPageServer(t, s, false)
	pc := newPageClient(t, srv)
	pc.login(testAdminToken)
	good := pc.cookie.Value

	otherToken := newAdminPage(s, []byte(testAdminToken+"-rotated"), newOutcomeLog(), nil, slog.New(slog.DiscardHandler))
	id, mac, _ := strings.Cut(good, ".")
	flip := []byte(mac)
	flip[0] ^= 'A' ^ 'B'
	for name, v := range map[string]string{
		"empty":         "",
		"no signature":  id,
		"bad signature": id + "." + string(flip),
		"other token":   otherToken.newSession(),
		"the token":     testAdminToken,
	} {
		pc.cookie.Value = v
		if res, _ := pc.do("GET", pagePath, nil); res.StatusCode != 401 {
			t.Errorf("%s cookie: %d, want 401", name, res.StatusCode)
		}
	}
	pc.cookie.Value = good
	if res, _ := pc.do("GET", pagePath, nil); res.StatusCode != 200 {
		t.Fatalf("good cookie: %d", res.StatusCode)
	}
	// Past its expiry: refused (the page's clock moved, not the test's).
	p.now = func() time.Time { return time.Now().Add(sessionTTL + time.Minute) }
	if res, body := pc.do("GET", pagePath, nil); res.StatusCode != 401 || !strings.Contains(body, "sign in again") {
		t.Fatalf("expired cookie: %d", res.StatusCode)
	}
}

// TestAdminPageSecureCookie: over TLS the session cookie is Secure.
func TestAdminPageSecureCookie(t *testing.T) {
	t.Parallel()
	_, srv := newPageServer(t, storetest.NewRefStore(), true)
	pc := newPageClient(t, srv)
	pc.c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // httptest's own certificate
	if res := pc.login(testAdminToken); res.StatusCode != http.StatusSeeOther || pc.cookie == nil || !pc.cookie.Secure {
		t.Fatalf("sign-in over TLS: %d, cookie %+v: want Secure", res.StatusCode, pc.cookie)
	}
}

// TestAdminPageSecureCookieBehindProxy: over plain HTTP from a proxy that
// terminated TLS and says so, the session cookie is Secure too; a proxy
// that says it was reached over HTTP, or no header, leaves it off.
func TestAdminPageSecureCookieBehindProxy(t *testing.T) {
	t.Parallel()
	_, srv := newPageServer(t, storetest.NewRefStore(), false)
	for _, tc := range []struct {
		header, value string
		secure        bool
	}{
		{"X-Forwarded-Proto", "https", true},
		{"X-Forwarded-Proto", "HTTPS, http", true},
		{"X-Forwarded-Proto", "http", false},
		{"X-Forwarded-Proto", "http, https", false}, // the browser's hop was HTTP
		{"Forwarded", `for=192.0.2.60;proto=https;by=203.0.113.43`, true},
		{"Forwarded", `for=192.0.2.60;proto="https", for=198.51.100.17;proto=http`, true},
		{"Forwarded", `for=192.0.2.60;proto=http`, false},
		{"Forwarded", `for=192.0.2.60`, false},
		{"", "", false},
	} {
		req, _ := http.NewRequest("POST", srv.URL+pagePath+"/login", strings.NewReader(url.Values{"token": {testAdminToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		c := srv.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		var got *http.Cookie
		for _, ck := range res.Cookies() {
			if ck.Name == sessionCookie {
				got = ck
			}
		}
		if res.StatusCode != http.StatusSeeOther || got == nil || got.Secure != tc.secure {
			t.Errorf("%s: %s: %d, cookie %+v: want Secure=%v", tc.header, tc.value, res.StatusCode, got, tc.secure)
		}
	}
}

// TestAdminPageEscapes: keys and route patterns are user-controlled; the
// page shows them as text.
func TestAdminPageEscapes(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	evil := `<script>alert("k")</script>"'&`
	_, cur := stuckKey(t, s, evil)
	p, srv := newPageServer(t, s, false)
	p.outcomes.hooks(`/x/<img src=x onerror=alert(1)>`, nil).Request(idemhttp.OutcomeExecuted, time.Millisecond)
	pc := newPageClient(t, srv)
	pc.bearer = testAdminToken
	res, body := pc.do("GET", pagePath, nil)
	if res.StatusCode != 200 || strings.Contains(body, "<script>") || strings.Contains(body, "<img") {
		t.Fatalf("page: %d, markup not escaped:\n%s", res.StatusCode, body)
	}
	if !strings.Contains(body, html.EscapeString(`<script>alert(`)) && !strings.Contains(body, "&lt;script&gt;alert(") {
		t.Fatalf("the key is not shown as text:\n%s", body)
	}
	// The form carries the key back exactly: releasing it by the form's
	// values frees it.
	m := regexp.MustCompile(`name="key" value="([^"]*)"`).FindStringSubmatch(body)
	if m == nil || html.UnescapeString(m[1]) != evil {
		t.Fatalf("form key %v, want %q", m, evil)
	}
	f := url.Values{"key": {html.UnescapeString(m[1])}, "token": {strconv.FormatUint(cur, 10)}}
	if res, body := pc.do("POST", pagePath+"/release", f); res.StatusCode != 200 || strings.Contains(body, "<script>") {
		t.Fatalf("release: %d\n%s", res.StatusCode, body)
	}
	if c, _ := s.Reserve(context.Background(), evil, nil, time.Hour); c.State != keystore.Acquired {
		t.Fatalf("after the release the key is %v, want free", c.State)
	}
}

// TestAdminPageUnsupported: a store that cannot list keys gets a message
// on the page, not a broken page.
func TestAdminPageUnsupported(t *testing.T) {
	t.Parallel()
	_, srv := newPageServer(t, bareStore{storetest.NewRefStore()}, false)
	pc := newPageClient(t, srv)
	pc.bearer = testAdminToken
	if res, body := pc.do("GET", pagePath, nil); res.StatusCode != 200 || !strings.Contains(body, "Cannot list keys") {
		t.Fatalf("page: %d\n%s", res.StatusCode, body)
	}
}

// bareStore hides every optional interface of its Store.
type bareStore struct{ keystore.Store }

func TestOutcomeLog(t *testing.T) {
	t.Parallel()
	l := newOutcomeLog()
	at := time.Unix(1_700_000_000, 0)
	l.now = func() time.Time { return at }
	h := l.hooks(defaultRoute, nil)
	for range 3 {
		h.Request(idemhttp.OutcomeExecuted, time.Millisecond)
	}
	h.Request(idemhttp.OutcomeReleased, time.Millisecond)
	for range 4 {
		h.Request(idemhttp.OutcomeReplayed, time.Millisecond)
	}
	for _, o := range []idemhttp.Outcome{idemhttp.OutcomeInProgress, idemhttp.OutcomeMismatch, idemhttp.OutcomePassThrough, idemhttp.OutcomeStoreError} {
		h.Request(o, time.Millisecond) // in neither side of the ratio
	}
	v := l.snapshot()
	if len(v) != 1 || v[0].Route != defaultRoute || v[0].Total != 12 || v[0].Replayed != 4 || v[0].Ran != 4 || v[0].Ratio != "50.0%" {
		t.Fatalf("snapshot: %+v", v)
	}
	if len(v[0].Recent) != 12 || v[0].Recent[0].Outcome != string(idemhttp.OutcomeStoreError) {
		t.Fatalf("recent, newest first: %+v", v[0].Recent)
	}
	// The ring keeps the newest recentOutcomes.
	for i := range 3 * recentOutcomes {
		at = at.Add(time.Second)
		h.Request(idemhttp.Outcome(fmt.Sprint("o", i)), 0)
	}
	v = l.snapshot()
	if r := v[0].Recent; len(r) != recentOutcomes || r[0].Outcome != fmt.Sprint("o", 3*recentOutcomes-1) || r[recentOutcomes-1].Outcome != fmt.Sprint("o", 2*recentOutcomes) {
		t.Fatalf("ring: %+v", r)
	}
	// No route before a replay or an execution has no ratio.
	l.hooks("/only-409", nil).Request(idemhttp.OutcomeInProgress, 0)
	for _, r := range l.snapshot() {
		if r.Route == "/only-409" && r.Ratio != "—" {
			t.Fatalf("ratio of a route with no execution: %q", r.Ratio)
		}
	}
}

// TestOutcomeLogBounded: routes beyond maxRoutes share one entry, and
// concurrent recording loses no count.
func TestOutcomeLogBounded(t *testing.T) {
	t.Parallel()
	l := newOutcomeLog()
	var next countingHooks
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				l.hooks(fmt.Sprintf("/r%d", g*100+i), &next).Request(idemhttp.OutcomeExecuted, 0)
			}
		})
	}
	wg.Wait()
	v := l.snapshot()
	var total uint64
	for _, r := range v {
		total += r.Total
	}
	if len(v) != maxRoutes+1 || total != 800 || next.n() != 800 {
		t.Fatalf("%d routes, %d outcomes, %d passed on: want %d, 800, 800", len(v), total, next.n(), maxRoutes+1)
	}
}

type countingHooks struct {
	mu sync.Mutex
	c  int
}

func (h *countingHooks) Request(idemhttp.Outcome, time.Duration) { h.mu.Lock(); h.c++; h.mu.Unlock() }
func (h *countingHooks) n() int                                  { h.mu.Lock(); defer h.mu.Unlock(); return h.c }

// TestHeldKeys: the page knows a key's age and route from the acquiring
// Reserve to the Complete or Release of that claim, never for another
// claim of the key, and renews leases only when the wrapped store does.
func TestHeldKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ref := storetest.NewRefStore()
	h := newHeldKeys()
	orders, payments := h.wrap(ref, "POST /orders"), h.wrap(ref, "POST /payments")
	if !keystore.CanExtend(orders) || keystore.CanExtend(h.wrap(bareStore{ref}, "x")) {
		t.Fatal("the wrapper's Extend does not follow the wrapped store's")
	}
	a, _ := orders.Reserve(ctx, "a", nil, time.Hour)
	if k, ok := h.lookup("a", a.Token); !ok || k.route != "POST /orders" {
		t.Fatalf("after Reserve: %+v %v", k, ok)
	}
	if _, ok := h.lookup("a", a.Token+1); ok {
		t.Fatal("found under another token")
	}
	if _, err := orders.(keystore.Extender).Extend(ctx, a, time.Hour); err != nil {
		t.Fatal(err)
	}
	if orders.Complete(ctx, a, []byte("r"), time.Hour) != nil {
		t.Fatal("Complete")
	}
	if _, ok := h.lookup("a", a.Token); ok {
		t.Fatal("still held after Complete")
	}
	b, _ := orders.Reserve(ctx, "b", nil, time.Hour)
	_ = orders.Release(ctx, b)
	if _, ok := h.lookup("b", b.Token); ok {
		t.Fatal("still held after Release")
	}
	// A lapsed lease taken over on another route: the new claim is the one
	// shown, and the old holder's late (refused) Complete does not drop it.
	old, _ := orders.Reserve(ctx, "c", nil, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	cur, _ := payments.Reserve(ctx, "c", nil, time.Hour)
	if !cur.Takeover {
		t.Fatalf("no takeover: %+v", cur)
	}
	if err := orders.Complete(ctx, old, nil, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("stale Complete: %v", err)
	}
	if k, ok := h.lookup("c", cur.Token); !ok || k.route != "POST /payments" {
		t.Fatalf("after the takeover: %+v %v", k, ok)
	}
	// Bounded.
	for i := range maxHeld + 10 {
		h.add(fmt.Sprint("k", i), 1, "r")
	}
	if n := len(h.m); n != maxHeld {
		t.Fatalf("%d keys held, want at most %d", n, maxHeld)
	}
}

// TestAdminPageHeld: a key this process reserved shows its route and age;
// one reserved elsewhere says so.
func TestAdminPageHeld(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	p, srv := newPageServer(t, s, false)
	if _, err := p.held.wrap(s, "POST /orders").Reserve(context.Background(), "mine", nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	stuckKey(t, s, "theirs")
	pc := newPageClient(t, srv)
	pc.bearer = testAdminToken
	_, body := pc.do("GET", pagePath, nil)
	mine := regexp.MustCompile(`<code>mine</code></td>\s*<td><code>POST /orders</code></td><td class="num">[0-9.]+[µm]?s</td>`)
	theirs := regexp.MustCompile(`<code>theirs</code></td>\s*<td class="other" colspan="2">another process</td>`)
	if !mine.MatchString(body) || !theirs.MatchString(body) {
		t.Fatalf("rows lack the route and age, or the other-process note:\n%s", body)
	}
}

// FuzzForwardedHTTPS: any header values parse without a panic, and a yes
// needs "https" in the header it came from.
func FuzzForwardedHTTPS(f *testing.F) {
	f.Add("https", "")
	f.Add("", `for=192.0.2.60;proto="https"`)
	f.Add("http, https", "proto=https")
	f.Fuzz(func(t *testing.T, xfp, fwd string) {
		h := http.Header{}
		if xfp != "" {
			h.Set("X-Forwarded-Proto", xfp)
		}
		if fwd != "" {
			h.Set("Forwarded", fwd)
		}
		if forwardedHTTPS(h) && !strings.Contains(strings.ToLower(h.Get("X-Forwarded-Proto")+h.Get("Forwarded")), "https") {
			t.Fatalf("X-Forwarded-Proto %q, Forwarded %q: HTTPS without https", xfp, fwd)
		}
	})
}
