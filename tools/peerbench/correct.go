package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
)

// The correctness scenarios of the HTTP comparison (ANCHORS.md): each is
// run against idemhttp and Fiber's idempotency middleware, and counts what
// a client would get wrong. idem's side must count 0 everywhere.

// execs counts a handler's executions per key, and fails the first
// execution of a key with 500 when failFirst is set.
type execs struct {
	mu        sync.Mutex
	n         map[string]int
	failFirst bool
}

func newExecs() *execs { return &execs{n: map[string]int{}} }

// run records an execution of key and says whether to fail it.
func (e *execs) run(key string) (fail bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[key]++
	return e.failFirst && e.n[key] == 1
}

func (e *execs) count(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

// echoBody is the body's "order" field, which the handler answers with:
// a client that gets another request's order got another's answer.
func echoBody(b []byte) string {
	var v struct{ Order string }
	_ = json.Unmarshal(b, &v)
	return v.Order
}

func orderBody(order string) string { return `{"order":"` + order + `"}` }

// scenarioServer is one side of a scenario: the URL of one or two
// instances sharing one store.
type scenarioServer struct {
	addrs []string
	close func()
}

// idemScenario serves the counting handler behind idemhttp, on n instances
// (Middlewares) sharing one memstore.
func idemScenario(e *execs, n int, delay time.Duration) (*scenarioServer, error) {
	ms, err := memstore.New()
	if err != nil {
		return nil, err
	}
	s := &scenarioServer{}
	var closers []func()
	closers = append(closers, func() { _ = ms.Close() })
	for range n {
		m, err := idemhttp.New(ms)
		if err != nil {
			return nil, err
		}
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			key, _ := idemhttp.KeyFrom(r.Context())
			fail := e.run(key)
			time.Sleep(delay)
			if fail {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, orderBody(echoBody(b)))
		}))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		closers = append(closers, func() { _ = srv.Close() })
		s.addrs = append(s.addrs, ln.Addr().String())
	}
	s.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	return s, nil
}

// mapStorage is a fiber.Storage over one map, shared by two Fiber
// instances as a shared Redis would be.
type mapStorage struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *mapStorage) Get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

func (s *mapStorage) Set(key string, val []byte, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = append([]byte(nil), val...)
	return nil
}

func (s *mapStorage) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

func (s *mapStorage) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = map[string][]byte{}
	return nil
}

func (s *mapStorage) Close() error { return nil }

func (s *mapStorage) GetWithContext(_ context.Context, key string) ([]byte, error) { return s.Get(key) }
func (s *mapStorage) SetWithContext(_ context.Context, key string, val []byte, exp time.Duration) error {
	return s.Set(key, val, exp)
}
func (s *mapStorage) DeleteWithContext(_ context.Context, key string) error { return s.Delete(key) }
func (s *mapStorage) ResetWithContext(context.Context) error                { return s.Reset() }

// fiberScenario serves the counting handler behind Fiber's idempotency
// middleware, on n instances sharing one storage (each with its own lock,
// the middleware's default).
func fiberScenario(e *execs, n int, delay time.Duration) (*scenarioServer, error) {
	st := &mapStorage{m: map[string][]byte{}}
	s := &scenarioServer{}
	var apps []*fiber.App
	for range n {
		app := fiber.New()
		app.Use(idempotency.New(idempotency.Config{KeyHeader: idemhttp.HeaderKey, Storage: st}))
		app.Post("/*", func(c fiber.Ctx) error {
			key := strings.Clone(c.Get(idemhttp.HeaderKey)) // fasthttp reuses its buffers
			fail := e.run(key)
			time.Sleep(delay)
			if fail {
				return c.SendStatus(http.StatusInternalServerError)
			}
			return c.Status(http.StatusCreated).SendString(orderBody(echoBody(c.Body())))
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		go func() { _ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
		apps = append(apps, app)
		s.addrs = append(s.addrs, ln.Addr().String())
	}
	s.close = func() {
		for _, a := range apps {
			_ = a.Shutdown()
		}
	}
	return s, nil
}

// wrong is what one scenario found on one side.
type wrong struct {
	Scenario string
	Side     string
	Count    int // answers a client got wrong, or keys run twice
	Of       int
	What     string
}

// correctness runs the HTTP scenarios on both sides; keys is how many keys
// the two-instance scenario uses.
func correctness(keys int) ([]wrong, error) {
	var out []wrong
	sides := []struct {
		name  string
		start func(e *execs, n int, delay time.Duration) (*scenarioServer, error)
	}{{"idemhttp", idemScenario}, {"fiber", fiberScenario}}
	k := newKeys()
	for _, side := range sides {
		// 1. The same key with another body: the first answer is wrong.
		e := newExecs()
		s, err := side.start(e, 1, 0)
		if err != nil {
			return nil, err
		}
		c := client(s.addrs[0], 16)
		bad := 0
		const reuse = 20
		for range reuse {
			key := k.next()
			if st, _, err := post(c, "/orders", key, orderBody("first")); err != nil || st != 201 {
				return nil, fmt.Errorf("peerbench: %s: first request: %d %v", side.name, st, err)
			}
			st, b, err := post(c, "/orders", key, orderBody("second"))
			if err != nil {
				return nil, err
			}
			if st < 400 && echoBody(b) != "second" {
				bad++ // answered as if it were the first request
			}
		}
		out = append(out, wrong{"same key, another body", side.name, bad, reuse, "answered with the first body's response"})

		// 2. Concurrent requests with one key and different bodies.
		const conc = 8
		const rounds = 10
		bad = 0
		for range rounds {
			key := k.next()
			var wg sync.WaitGroup
			var got atomic.Int32
			for i := range conc {
				wg.Go(func() {
					order := "o" + strconv.Itoa(i)
					st, b, err := post(c, "/orders", key, orderBody(order))
					if err == nil && st < 400 && echoBody(b) != order {
						got.Add(1)
					}
				})
			}
			wg.Wait()
			bad += int(got.Load())
		}
		s.close()
		out = append(out, wrong{"8 concurrent bodies, one key", side.name, bad, conc * rounds, "got another request's answer"})

		// 3. The first execution fails with 500: the retry must execute.
		e = newExecs()
		e.failFirst = true
		if s, err = side.start(e, 1, 0); err != nil {
			return nil, err
		}
		c = client(s.addrs[0], 4)
		bad = 0
		const fails = 20
		for range fails {
			key := k.next()
			_, _, _ = post(c, "/orders", key, orderBody("x"))
			st, _, err := post(c, "/orders", key, orderBody("x"))
			if err != nil || st != 201 {
				bad++ // stuck: the retry never succeeds
			}
		}
		s.close()
		out = append(out, wrong{"first attempt 500, then retried", side.name, bad, fails, "retry got the stored 500 (stuck)"})

		// 4. Two instances over one store, each key sent to both at once.
		e = newExecs()
		if s, err = side.start(e, 2, 20*time.Millisecond); err != nil {
			return nil, err
		}
		c0, c1 := client(s.addrs[0], 64), client(s.addrs[1], 64)
		var wg sync.WaitGroup
		var lost atomic.Int32
		ks := make([]string, keys)
		sem := make(chan struct{}, 32)
		for i := range ks {
			ks[i] = k.next()
			for _, hc := range []*fasthttp.HostClient{c0, c1} {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					// A retry loop, as a client does on 409.
					for range 200 {
						st, _, err := post(hc, "/orders", ks[i], orderBody("x"))
						if err == nil && st == 201 {
							return
						}
						time.Sleep(10 * time.Millisecond)
					}
					lost.Add(1)
				})
			}
		}
		wg.Wait()
		s.close()
		twice, never := 0, 0
		for _, key := range ks {
			switch n := e.count(key); {
			case n > 1:
				twice++
			case n == 0:
				never++
			}
		}
		out = append(out, wrong{"two instances, one store", side.name, twice, keys, "keys executed twice"})
		out = append(out, wrong{"two instances, one store", side.name, never + int(lost.Load()), keys, "keys lost or never answered 201"})
	}
	return out, nil
}
