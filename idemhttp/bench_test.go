package idemhttp_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/compactbench"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/uuidtext"
)

// benchBody is a small JSON order, the kind of body an Idempotency-Key
// guards.
const benchBody = `{"customer":"c-1042","amount":1299,"currency":"EUR","items":[{"sku":"pen","qty":2}]}`

// benchHandler reads the request and answers 201 with a small JSON body,
// as an API's create endpoint does.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/1042")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"o-1042","status":"created"}`)
})

// nullWriter is the cheapest http.ResponseWriter: the benchmark measures the
// middleware, not a recorder.
type nullWriter struct {
	h      http.Header
	status int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) WriteHeader(code int)        { w.status = code }
func (w *nullWriter) Write(p []byte) (int, error) { return len(p), nil }

// SetReadDeadline and SetWriteDeadline are what http.ResponseController
// finds on a server's writer; the real cost of a deadline (a runtime timer
// on the connection) is in tools/peerbench's numbers.
func (w *nullWriter) SetReadDeadline(time.Time) error  { return nil }
func (w *nullWriter) SetWriteDeadline(time.Time) error { return nil }

// keyGen makes UUIDv4-shaped keys, each new: a random base and a counter.
// Both sides of a comparison pay for it.
type keyGen struct {
	u [16]byte
	n uint64
}

func newKeyGen() *keyGen {
	g := &keyGen{}
	_, _ = rand.Read(g.u[:])
	return g
}

func (g *keyGen) next() string {
	g.n++
	binary.BigEndian.PutUint64(g.u[8:], g.n)
	g.u[6] = g.u[6]&0x0f | 0x40
	return uuidtext.Format(g.u)
}

// BenchmarkMiddleware is idemhttp on memstore beside the bare handler, in
// one run: bare is the handler alone, new a fresh UUIDv4 key every request
// (Reserve, the handler, Complete), replay a completed key (Reserve
// answers Done, the stored response is written). The difference between
// idemhttp/* and bare is the middleware's own cost (docs/benchmarks.md,
// Peers).
func BenchmarkMiddleware(b *testing.B) {
	m, err := idemhttp.New(dbtest.MemStore(b))
	if err != nil {
		b.Fatal(err)
	}
	idem := m.Handler(benchHandler)
	serve := func(b *testing.B, h http.Handler, key func() string) {
		w := &nullWriter{h: http.Header{}}
		serveRequests(context.Background(), b, h, w, w, key)
	}
	gen := newKeyGen()
	b.Run("bare", func(b *testing.B) { serve(b, benchHandler, gen.next) })
	b.Run("new", func(b *testing.B) { serve(b, idem, gen.next) })
	replay := gen.next()
	b.Run("replay", func(b *testing.B) {
		serve(b, idem, func() string { return replay })
	})
}

// serveRequests serves h a POST of benchBody with key() as its key, as
// many times as b asks, written to w (nw is w's nullWriter, reset each
// time), and reports the allocations and the CPU a request. The request
// carries ctx.
func serveRequests(ctx context.Context, b *testing.B, h http.Handler, w http.ResponseWriter, nw *nullWriter, key func() string) {
	b.ReportAllocs()
	body := strings.NewReader(benchBody)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.example/orders", body)
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer bench-client")
	r.Header.Set("Content-Type", "application/json")
	cpu := compactbench.CPUTime()
	n := 0
	for b.Loop() {
		n++
		clear(nw.h)
		nw.status = 0
		body.Reset(benchBody)
		r.Body, r.ContentLength = io.NopCloser(body), int64(len(benchBody))
		r.Header[idemhttp.HeaderKey] = []string{key()}
		h.ServeHTTP(w, r)
		if nw.status != http.StatusCreated {
			b.Fatalf("status %d", nw.status)
		}
	}
	b.ReportMetric(float64(compactbench.CPUTime()-cpu)/float64(n), "cpu-ns/op")
}

// connWriter is nullWriter with a real connection's deadlines: each
// SetReadDeadline arms or stops a runtime timer on a loopback TCP socket,
// as net/http's writer does.
type connWriter struct {
	nullWriter
	c net.Conn
}

func (w *connWriter) SetReadDeadline(t time.Time) error { return w.c.SetReadDeadline(t) }

// BenchmarkBodyDeadline is a new key with the body deadline on a real
// connection: own, the middleware sets its body timeout and lifts it;
// server, the request comes through an http.Server whose ReadTimeout
// (10 s) is tighter than the body timeout (30 s), which then stands and
// the middleware sets none. The difference is the deadline's cost; -count
// runs each case that many times in a row, so alternate them by running
// the binary again (docs/benchmarks.md).
func BenchmarkBodyDeadline(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	defer (<-accepted).Close()
	gen := newKeyGen()
	for _, tc := range []struct {
		name string
		srv  *http.Server
	}{{"own", nil}, {"server", &http.Server{ReadTimeout: 10 * time.Second}}} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := idemhttp.New(dbtest.MemStore(b)) // a store a run: -count does not fill one
			if err != nil {
				b.Fatal(err)
			}
			w := &connWriter{nullWriter: nullWriter{h: http.Header{}}, c: c}
			ctx := context.Background()
			if tc.srv != nil {
				ctx = context.WithValue(ctx, http.ServerContextKey, tc.srv)
			}
			serveRequests(ctx, b, m.Handler(benchHandler), w, &w.nullWriter, gen.next)
		})
	}
}
