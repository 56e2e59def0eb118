package idemcaddy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// within is how long a condition may take to hold: generous, for a
// machine at load 10 and more.
const within = 90 * time.Second

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, within, what, cond)
}

// deadPort is a loopback port that refuses connections for the whole test
// (testenv.RefusingAddr): a free port closed and named in the Caddyfile was
// taken by another test's HTTP server in a flake run, and the "down" route's
// Redis client parsed "HTTP/1.1 400 Bad Request" as its reply.
func deadPort(t *testing.T) int {
	t.Helper()
	addr, _ := testenv.RefusingAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return n
}

// caddyProc is a Caddy process started from a Caddyfile.
type caddyProc struct {
	base, admin string
	adminSock   string // the admin API's socket, for caddy reload --address
	dir         string
	vars        map[string]string
	log         *testenv.SyncBuffer
	client      *http.Client
}

// The site and the admin API listen on Unix sockets in the test's
// directory, so no other test's server can take their addresses (a free
// TCP port, checked and closed, can be taken before Caddy binds it). The
// client reaches them through these two URLs, which its transport dials
// as the two sockets; the site's URL is the host its Caddyfile names.
const (
	siteURL  = "http://127.0.0.1:8080"
	adminURL = "http://127.0.0.1:2019"
)

// startCaddy writes caddyfile (with {{NAME}} replaced by vars, {{SITE}}
// and {{ADMIN}} by the network addresses of the site's and the admin API's
// sockets, and {{PORT}} by the site address's port) and runs `caddy run`
// on it until the test ends. It returns once the site answers GET
// /healthz.
func startCaddy(t *testing.T, caddyfile string, vars map[string]string) *caddyProc {
	t.Helper()
	bin := needCaddy(t)
	dir := t.TempDir()
	site, admin := filepath.Join(dir, "site.sock"), filepath.Join(dir, "admin.sock")
	socks := map[string]string{strings.TrimPrefix(siteURL, "http://"): site, strings.TrimPrefix(adminURL, "http://"): admin}
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		sock, ok := socks[addr]
		if !ok {
			return nil, fmt.Errorf("caddy test client: no socket for %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	p := &caddyProc{dir: dir, vars: map[string]string{}, base: siteURL, admin: adminURL, adminSock: "unix/" + admin,
		// No keep-alive: after a reload each request reaches the new
		// config.
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: dial}, Timeout: within}}
	for k, v := range vars {
		p.vars[k] = v
	}
	p.vars["SITE"] = "unix/" + site
	p.vars["ADMIN"] = p.adminSock
	p.vars["PORT"] = strings.TrimPrefix(siteURL, "http://127.0.0.1:")
	path := p.write(t, caddyfile)
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	proc := testenv.StartProc(t, "caddy", cmd, 30*time.Second)
	p.log = proc.Out
	exited := proc.Exited
	waitFor(t, "caddy answers GET /healthz (log:\n"+p.log.String()+")", func() bool {
		select {
		case <-exited:
			t.Fatalf("caddy exited:\n%s", p.log.String())
		default:
		}
		res, err := p.client.Get(p.base + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return p
}

// write expands caddyfile and writes it to the process's directory.
func (p *caddyProc) write(t *testing.T, caddyfile string) string {
	t.Helper()
	for k, v := range p.vars {
		caddyfile = strings.ReplaceAll(caddyfile, "{{"+k+"}}", v)
	}
	if i := strings.Index(caddyfile, "{{"); i >= 0 {
		t.Fatalf("caddyfile: unreplaced %q", caddyfile[i:min(len(caddyfile), i+20)])
	}
	path := filepath.Join(p.dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// response is what a request got.
type response struct {
	status   int
	body     string
	replayed bool
	header   http.Header
}

// post sends a POST with the key (none if empty), the principal in
// Authorization (none if empty), and body.
func (p *caddyProc) post(t *testing.T, path, key, auth, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Case", key)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := p.client.Do(req)
	if err != nil {
		t.Errorf("POST %s (key %q): %v", path, key, err)
		return response{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, body: string(b), replayed: res.Header.Get("Idempotent-Replayed") == "true", header: res.Header}
}

// upstream is the API behind Caddy: it counts the calls per X-Case (the
// test's key) and can hold a case's calls until released.
type upstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	holds   map[string]chan struct{}
	entered map[string]chan struct{}
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{calls: map[string]int{}, holds: map[string]chan struct{}{}, entered: map[string]chan struct{}{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.Header.Get("X-Case")
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.calls[c]++
		n := u.calls[c]
		hold, entered := u.holds[c], u.entered[c]
		u.mu.Unlock()
		if entered != nil {
			select {
			case <-entered:
			default:
				close(entered)
			}
		}
		if hold != nil {
			<-hold
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"call":%d,"auth":%q,"body":%q}`, n, r.Header.Get("Authorization"), body)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

func (u *upstream) count(c string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[c]
}

// hold makes calls with X-Case c wait until release; entered is closed
// when the first arrives.
func (u *upstream) hold(c string) (entered <-chan struct{}, release func()) {
	h, e := make(chan struct{}), make(chan struct{})
	u.mu.Lock()
	u.holds[c], u.entered[c] = h, e
	u.mu.Unlock()
	return e, sync.OnceFunc(func() { close(h) })
}

// postHeld posts an empty body with key as Bearer alice while up holds
// the key's call: it returns once the call has reached up, with the
// channel of its response and the release of the hold (released anyway
// when the test ends).
func (p *caddyProc) postHeld(t *testing.T, up *upstream, path, key string) (<-chan response, func()) {
	t.Helper()
	entered, release := up.hold(key)
	t.Cleanup(release)
	first := make(chan response, 1)
	go func() { first <- p.post(t, path, key, "Bearer alice", `{}`) }()
	wait(t, "the request with key "+key+" reaches the upstream", entered)
	return first, release
}

// wait blocks until ch is closed, or fails t after within.
func wait(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("after %v: %s", within, what)
	}
}

// runCaddy runs the Caddy binary with args (a CLI command such as
// reload) and returns its output.
func runCaddy(t *testing.T, args ...string) (string, error) {
	cmd := exec.Command(needCaddy(t), args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type reloadError struct {
	err error
	out string
}

func (e *reloadError) Error() string { return "caddy reload: " + e.err.Error() + "\n" + e.out }
