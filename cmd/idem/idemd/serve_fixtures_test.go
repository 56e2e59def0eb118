package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// The end-to-end tests run `idem serve` as separate processes (this test
// binary re-executed as the idem command) in front of a counting upstream.

const execEnv = "IDEM_TEST_EXEC_MAIN"

func TestMain(m *testing.M) {
	testenv.Child(execEnv, func() int {
		os.Args = append([]string{"idem"}, os.Args[1:]...)
		main()
		return 0
	})
	os.Exit(testenv.Main(m))
}

// counter is a test upstream that counts executions per path.
type counter struct {
	mu    sync.Mutex
	n     map[string]int
	total atomic.Int32
	srv   *httptest.Server
}

func newUpstream(t *testing.T) *counter {
	c := &counter{n: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.total.Add(1)
		c.mu.Lock()
		c.n[r.URL.Path]++
		n := c.n[r.URL.Path]
		c.mu.Unlock()
		switch r.URL.Path {
		case "/slow":
			time.Sleep(400 * time.Millisecond)
		case "/hold": // the first time, until the proxy gives up on it (at most a minute)
			if n > 1 {
				break
			}
			select {
			case <-time.After(time.Minute):
			case <-r.Context().Done():
				return
			}
		case "/very-slow": // slow the first time only
			if n > 1 {
				break
			}
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
				return
			}
		case "/fail-once":
			if n == 1 {
				http.Error(w, "database down", http.StatusInternalServerError)
				return
			}
		case "/crash-once":
			if n == 1 { // the upstream dies mid-request
				conn, _, _ := http.NewResponseController(w).Hijack()
				conn.Close()
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.Header().Set("Set-Cookie", "s=1")
		w.Header().Set("X-Request-Id", fmt.Sprint(time.Now().UnixNano()))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"n":%d,"len":%d}`, n, len(body))
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

type proxyProc struct {
	url   string
	admin string
	cmd   *exec.Cmd
	out   *syncBuffer // stdout and stderr, readable while it runs
}

// syncBuffer is a child's or a server's output, read while it is written.
type syncBuffer = testenv.SyncBuffer

// deadAddr is a loopback address nothing listens on for the whole test
// (testenv.RefusingAddr): a free address closed and named to a child can
// be taken by another test's server before the child connects.
func deadAddr(t *testing.T) string {
	t.Helper()
	addr, _ := testenv.RefusingAddr(t)
	return addr
}

// startServe runs `idem serve` and waits until it answers.
func startServe(t *testing.T, upstream, store string, flags ...string) *proxyProc {
	t.Helper()
	return launchServe(t, "idem serve", 30*time.Second, func(listen, admin string) *exec.Cmd {
		args := append([]string{"serve", "--listen", listen, "--admin-listen", admin, "--upstream", upstream, "--store", store}, flags...)
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), execEnv+"=1")
		return cmd
	})
}

// launchServe starts the idem serve command that command makes for the
// listen and admin addresses it is given, kills it when the test ends
// (logging its output, named name, if the test failed) and waits up to
// within until it answers. The addresses have port 0: the child binds
// ports the kernel picks and logs them, and the test reads them from its
// log, so no other test's server can take them between a check that they
// are free and the child's bind.
func launchServe(t *testing.T, name string, within time.Duration, command func(listen, admin string) *exec.Cmd) *proxyProc {
	t.Helper()
	p := &proxyProc{out: &syncBuffer{}}
	p.cmd = command("127.0.0.1:0", "127.0.0.1:0")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out)
		}
	})
	testenv.WaitFor(t, within, name+" logs the addresses it listens on", func() bool {
		listen, admin := listenedAddr(p.out.String(), "idem serve listening"), listenedAddr(p.out.String(), "admin listening")
		p.url, p.admin = "http://"+listen, "http://"+admin
		return listen != "" && admin != ""
	})
	testenv.WaitFor(t, within, "idem serve answers GET /healthz", func() bool {
		r, err := http.Get(p.admin + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil
	})
	return p
}

// listenedAddr returns the addr attribute of the first line of log whose
// message is msg (idem serve's text log), or "".
func listenedAddr(log, msg string) string {
	_, after, ok := strings.Cut(log, "msg=\""+msg+"\" addr=")
	if !ok {
		return ""
	}
	end := strings.IndexAny(after, " \n")
	if end < 0 {
		return "" // the line is not whole yet
	}
	return after[:end]
}

// terminate sends SIGTERM and fails the test unless the process exits
// cleanly within 20 s.
func (p *proxyProc) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("idem serve exited with %v after SIGTERM:\n%s", err, p.out)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("idem serve did not exit within 20 s of SIGTERM:\n%s", p.out)
	}
}

// waitFor polls cond for up to 15 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 15*time.Second, "condition not reached", cond)
}

func recv(t *testing.T, c chan reply) reply {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no reply in 20s")
		return reply{}
	}
}

// client bounds every request, so a hung proxy fails the test instead of
// the test binary.
var client = &http.Client{Timeout: 20 * time.Second}

type reply struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, base, path, key, body string, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// Keyed requests need a principal (no anonymous scope by default); a
	// header given with an empty value is removed.
	req.Header.Set("Authorization", "Bearer e2e-client")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := client.Do(req)
	if err != nil { // Errorf, not Fatalf: post runs in goroutines too
		t.Errorf("POST %s: %v", path, err)
		return reply{status: -1, body: err.Error()}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(b)}
}

// runServeExit runs `idem serve` expecting it to refuse to start.
func runServeExit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), execEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
