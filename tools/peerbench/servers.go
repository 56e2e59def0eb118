package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
)

// The four HTTP servers of the comparison, each answering POST /orders (a
// create endpoint: read the JSON body, answer 201 with a small JSON body)
// and POST /slow (the same after slowHandler, for the waiting duplicates).
const (
	srvBare      = "net/http"
	srvIdem      = "idemhttp"
	srvFiber     = "fiber"
	srvFiberIdem = "fiber+idempotency"
)

var serverNames = []string{srvBare, srvIdem, srvFiber, srvFiberIdem}

// slowHandler is how long /slow takes: long enough that every duplicate of
// a batch arrives while the first runs.
const slowHandler = 50 * time.Millisecond

const respBody = `{"id":"o-1042","status":"created"}`

func created(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/1042")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, respBody)
}

func fiberCreated(c fiber.Ctx) error {
	_ = c.Body()
	c.Set("Content-Type", "application/json")
	c.Set("Location", "/orders/1042")
	return c.Status(http.StatusCreated).SendString(respBody)
}

// servers is the four servers, listening on loopback.
type servers struct {
	addr  map[string]string
	close []func()
}

// startServers starts the four servers. idemhttp and Fiber's middleware
// use their defaults, but for the key header (Fiber's default is
// X-Idempotency-Key) and a wait on /slow (idemhttp's WithWait; Fiber's
// middleware always waits, on a per-process lock).
func startServers() (*servers, error) {
	// The net/http servers' ReadTimeout (-read-timeout; 0, none, by
	// default), the same for the bare server and idemhttp's.
	readTimeout, err := time.ParseDuration(cmp.Or(os.Getenv(serveEnv+"_READ_TIMEOUT"), "0s"))
	if err != nil {
		return nil, fmt.Errorf("peerbench: %s_READ_TIMEOUT: %w", serveEnv, err)
	}
	s := &servers{addr: map[string]string{}}
	listen := func(name string) (net.Listener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			s.addr[name] = ln.Addr().String()
		}
		return ln, err
	}
	goHTTP := func(name string, h http.Handler) error {
		ln, err := listen(name)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: readTimeout}
		goLabeled(name, func() { _ = srv.Serve(ln) })
		s.close = append(s.close, func() { _ = srv.Close() })
		return nil
	}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slowHandler)
		created(w, r)
	})
	bare := http.NewServeMux()
	bare.HandleFunc("POST /orders", created)
	bare.Handle("POST /slow", slow)
	if err := goHTTP(srvBare, bare); err != nil {
		return nil, err
	}
	ms, err := memstore.New()
	if err != nil {
		return nil, err
	}
	s.close = append(s.close, func() { _ = ms.Close() })
	m, err := idemhttp.New(ms)
	if err != nil {
		return nil, err
	}
	mw, err := idemhttp.New(ms, idemhttp.WithWait(10*time.Second))
	if err != nil {
		return nil, err
	}
	idem := http.NewServeMux()
	idem.Handle("POST /orders", m.Handler(http.HandlerFunc(created)))
	idem.Handle("POST /slow", mw.Handler(slow))
	if err := goHTTP(srvIdem, idem); err != nil {
		return nil, err
	}
	goFiber := func(name string, mws ...any) error {
		app := fiber.New()
		for _, mw := range mws {
			app.Use(mw)
		}
		app.Post("/orders", fiberCreated)
		app.Post("/slow", func(c fiber.Ctx) error {
			time.Sleep(slowHandler)
			return fiberCreated(c)
		})
		ln, err := listen(name)
		if err != nil {
			return err
		}
		goLabeled(name, func() { _ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) })
		s.close = append(s.close, func() { _ = app.Shutdown() })
		return nil
	}
	if err := goFiber(srvFiber); err != nil {
		return nil, err
	}
	if err := goFiber(srvFiberIdem, idempotency.New(idempotency.Config{KeyHeader: idemhttp.HeaderKey})); err != nil {
		return nil, err
	}
	return s, nil
}

// goLabeled runs serve on a goroutine labelled server=name, a label that
// the goroutines it starts (a connection's, a worker's) inherit: the
// server profile (PEERBENCH_SERVE_PROFILE) splits by server with
// `go tool pprof -tagfocus server=idemhttp`. The garbage collector's
// workers carry no label.
func goLabeled(name string, serve func()) {
	go pprof.Do(context.Background(), pprof.Labels("server", name), func(context.Context) { serve() })
}

func (s *servers) Close() {
	for i := len(s.close) - 1; i >= 0; i-- {
		s.close[i]()
	}
}

// serveEnv makes the program a server process: the parent runs the load
// and reads the child's CPU time, so that the client's work is not
// counted as the server's.
const serveEnv = "PEERBENCH_SERVE"

// startCPUProfile writes this process's CPU profile to path until
// pprof.StopCPUProfile.
func startCPUProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return pprof.StartCPUProfile(f)
}

// serveChild runs the servers, prints "name address" lines and "ready",
// and returns when its standard input closes. With PEERBENCH_SERVE_PROFILE
// set, it writes its CPU profile there.
func serveChild() {
	if path := os.Getenv(serveEnv + "_PROFILE"); path != "" {
		if err := startCPUProfile(path); err != nil {
			fmt.Fprintln(os.Stderr, "peerbench: server profile:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	s, err := startServers()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerbench: servers:", err)
		os.Exit(1)
	}
	for _, n := range serverNames {
		fmt.Printf("%s %s\n", n, s.addr[n])
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
}

// child is the server process, seen from the parent.
type child struct {
	pid   int
	addr  map[string]string
	stdin io.Closer
	wait  func() error
}

// readAddrs reads serveChild's lines.
func readAddrs(r io.Reader) (map[string]string, error) {
	addr := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if sc.Text() == "ready" {
			return addr, nil
		}
		var name, a string
		// Names hold no spaces but "fiber+idempotency": split at the last.
		line := sc.Text()
		for i := len(line) - 1; i >= 0; i-- {
			if line[i] == ' ' {
				name, a = line[:i], line[i+1:]
				break
			}
		}
		addr[name] = a
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("peerbench: the server process ended before it was ready")
}

var closeOnce sync.Once

func (c *child) Close() error {
	var err error
	closeOnce.Do(func() {
		_ = c.stdin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- c.wait() }()
		select {
		case err = <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	})
	return err
}
