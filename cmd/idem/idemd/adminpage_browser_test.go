package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
)

// screenshotEnv names the file TestOperatorPageBrowser writes its
// screenshot of the page to (docs/img/operator-page.png in the docs).
const screenshotEnv = "IDEM_SCREENSHOT"

// chromium is the headless browser's path; without one the test skips
// (fails under CI=true) with the command that installs it.
func chromium(t *testing.T) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "chromium-headless-shell", "headless-shell", "google-chrome"}
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	testenv.Missing(t, "chromium", "apt-get install -y chromium", fmt.Errorf("none of %s is in $PATH", strings.Join(names, ", ")))
	return ""
}

// TestOperatorPageBrowser drives the operator page of a real idem serve
// (SQLite, an admin token, two routes) in headless Chromium: a wrong token
// is refused; the page lists a key held by a request the upstream never
// answers; a release with a stale token and one without the CSRF token are
// refused and leave the key held; the button frees it. Every change is
// checked in the store, not only on the page.
func TestOperatorPageBrowser(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	dir := t.TempDir()
	hang := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" { // never answers while the test runs
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "made %s", r.URL.Path)
	}))
	defer up.Close()
	defer close(hang)
	cfg := filepath.Join(dir, "routes.yaml")
	tokenFile := filepath.Join(dir, "token")
	if os.WriteFile(cfg, []byte("routes:\n  - pattern: POST /orders\n  - pattern: POST /payments\n    ttl: 1h\n"), 0o600) != nil ||
		os.WriteFile(tokenFile, []byte(testAdminToken+"\n"), 0o600) != nil {
		t.Fatal("cannot write the config")
	}
	db := "sqlite:" + filepath.Join(dir, "idem.db")
	p := startServe(t, up.URL, db, "--admin-token-file", tokenFile, "--config", cfg, "--lease", "2s")

	// Outcomes on two routes: executions, replays, a mismatch.
	for i, r := range []struct{ path, key, body string }{
		{"/orders", "o-1", "pen"}, {"/orders", "o-1", "pen"}, {"/orders", "o-1", "pen"}, {"/orders", "o-2", "ink"},
		{"/payments", "p-1", "10"}, {"/payments", "p-1", "10"}, {"/payments", "p-1", "11"}, {"/payments", "p-2", "12"},
	} {
		if rep := post(t, p.url, r.path, r.key, r.body); rep.status != 201 && rep.status != 422 {
			t.Fatalf("request %d: %d %s", i, rep.status, rep.body)
		}
	}
	// A key held by a request the upstream never answers: its 2 s lease
	// is renewed while the proxy waits.
	hctx, stopHang := context.WithCancel(context.Background())
	defer stopHang()
	go func() {
		req, _ := http.NewRequestWithContext(hctx, "POST", p.url+"/hang", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "stuck-1")
		req.Header.Set("Authorization", "Bearer e2e-client")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	spec, _ := parseStoreSpec(db)
	opened, err := openStore(context.Background(), spec, keystore.DefaultMaxResultSize)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.close()
	in, _ := keystore.As[keystore.Inspector](opened.Store)
	var stuck keystore.KeyInfo
	waitFor(t, func() bool {
		keys, _, err := in.List(context.Background(), keystore.ListOptions{State: keystore.InProgress})
		if err == nil && len(keys) == 1 {
			stuck = keys[0]
		}
		return err == nil && len(keys) == 1
	})
	stillHeld := func(after string) {
		t.Helper()
		k, err := in.Inspect(context.Background(), stuck.Key)
		if err != nil || k.State != keystore.InProgress || k.Token != stuck.Token {
			t.Fatalf("after %s the key is %v token %d (%v), want still held under token %d", after, k.State, k.Token, err, stuck.Token)
		}
	}
	// The proxy renews the lease while the upstream works: the key is
	// held, under the same token, two and a half leases on.
	time.Sleep(5 * time.Second)
	stillHeld("two and a half leases of a live holder")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1200, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	page := p.admin + pagePath
	status := func(what string, want int64, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		res, err := chromedp.RunResponse(ctx, steps...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Status != want {
			t.Fatalf("%s: status %d, want %d", what, res.Status, want)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	absent := func(sel string) bool {
		t.Helper()
		none, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf("document.querySelector(%q) === null", sel)))
		if err != nil {
			t.Fatal(err)
		}
		return none
	}

	// Not signed in: the sign-in form. A wrong token: 401, no keys shown.
	status("open the page", 401, chromedp.Navigate(page))
	status("sign in with a wrong token", 401, chromedp.SendKeys(chromedp.ID("token"), "not-the-admin-token"), chromedp.Click(chromedp.ID("login")))
	if n := text("#notice"); !strings.Contains(n, "Wrong token") || !absent("#keys") {
		t.Fatalf("after a wrong token: notice %q, keys shown %v", n, !absent("#keys"))
	}
	// The right token: the page lists the stuck key (its route the
	// flags', "default") and both routes' outcomes.
	status("sign in", 200, chromedp.SendKeys(chromedp.ID("token"), testAdminToken), chromedp.Click(chromedp.ID("login")))
	if keys := text("#keys"); !strings.Contains(keys, stuck.Key) || !strings.Contains(keys, strconv.FormatUint(stuck.Token, 10)) || !strings.Contains(keys, defaultRoute) {
		t.Fatalf("the page does not list %s (token %d):\n%s", stuck.Key, stuck.Token, keys)
	}
	routes := text("#routes")
	for _, want := range []string{"POST /orders", "replay ratio 50.0%", "POST /payments", "replay ratio 33.3%", "mismatch"} {
		if !strings.Contains(routes, want) {
			t.Fatalf("the routes lack %q:\n%s", want, routes)
		}
	}
	if path := os.Getenv(screenshotEnv); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(path, png, 0o644)
		}
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
	}

	// A stale token (not the key's lease): refused, the key still held.
	staleTok := strconv.FormatUint(stuck.Token+1, 10)
	status("release with a stale token", 409,
		chromedp.SetValue(chromedp.CSS(`form.release input[name="token"]`), staleTok), chromedp.Click(chromedp.CSS("form.release button")))
	if n := text("#notice"); !strings.Contains(n, "refused") || !strings.Contains(n, "nothing was changed") {
		t.Fatalf("stale release: notice %q", n)
	}
	stillHeld("a release with a stale token")
	// A form without its CSRF token: 403, the key still held.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector('form.release input[name="csrf"]').remove(), true)`)); err != nil {
		t.Fatal(err)
	}
	status("release without a CSRF token", 403, chromedp.Click(chromedp.CSS("form.release button")))
	stillHeld("a release without a CSRF token")

	// The button, as drawn: the key is freed.
	status("back to the page", 200, chromedp.Navigate(page))
	status("release", 200, chromedp.Click(chromedp.CSS("form.release button")))
	if n := text("#notice"); !strings.Contains(n, "Released "+stuck.Key) {
		t.Fatalf("release: notice %q", n)
	}
	if k, err := in.Inspect(context.Background(), stuck.Key); !errors.Is(err, keystore.ErrNotFound) && (err != nil || k.Token == stuck.Token) {
		t.Fatalf("after the release the key is %v token %d (%v), want freed", k.State, k.Token, err)
	}
	if !absent("form.release") && strings.Contains(text("#keys"), strconv.FormatUint(stuck.Token, 10)) {
		t.Fatalf("the page still lists the released lease:\n%s", text("#keys"))
	}
}
