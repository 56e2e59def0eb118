package idemhttp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
)

// eventServer is a webhook receiver behind the middleware: its effect
// counts how often the upstream ran.
type eventServer struct {
	t       *testing.T
	srv     *httptest.Server
	effects atomic.Int32
	store   *countingStore
	status  int           // the upstream's status (default 200)
	block   chan struct{} // if set, the upstream waits on it
	started chan struct{}
}

func newEventServer(t *testing.T, opts ...idemhttp.Option) *eventServer {
	t.Helper()
	ms := dbtest.MemStore(t)
	e := &eventServer{t: t, store: &countingStore{Store: ms}, status: http.StatusOK}
	m, err := idemhttp.New(e.store, append([]idemhttp.Option{idemhttp.WithScopeHeader("X-Sender")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := e.effects.Add(1)
		if e.block != nil {
			close(e.started)
			<-e.block
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(e.status)
		fmt.Fprintf(w, "effect %d of %d bytes", n, len(body))
	})))
	t.Cleanup(e.srv.Close)
	return e
}

type sent struct {
	status int
	body   string
	header http.Header
}

// send posts body with the headers (name, value pairs); the sender is
// "github" unless an X-Sender is given.
func (e *eventServer) send(body string, headers ...string) sent {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/hook", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-Sender", "github")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return sent{status: res.StatusCode, body: string(b), header: res.Header}
}

func sentProblem(t *testing.T, s sent) string {
	t.Helper()
	var p struct{ Type, Title, Detail string }
	if err := json.Unmarshal([]byte(s.body), &p); err != nil {
		t.Fatalf("not a problem: %d %q", s.status, s.body)
	}
	_, typ, _ := strings.Cut(p.Type, "#")
	return typ
}

// TestKeySourceHeader: each webhook sender's delivery header keys the
// route; a redelivery is absorbed, another delivery and the same delivery
// id from another principal are not.
func TestKeySourceHeader(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"X-GitHub-Delivery", "X-Shopify-Webhook-Id", "webhook-id"} {
		t.Run(h, func(t *testing.T) {
			t.Parallel()
			e := newEventServer(t, idemhttp.WithKeySource(idemhttp.KeyFromHeader(h)))
			body := `{"action":"opened","number":7}`
			first := e.send(body, h, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
			again := e.send(body, h, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
			if first.status != 200 || again.status != 200 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("redelivery: %+v then %+v", first, again)
			}
			if n := e.effects.Load(); n != 1 {
				t.Fatalf("redelivery ran the effect %d times", n)
			}
			if got := first.header.Get(idemhttp.HeaderKey); got != "" {
				t.Errorf("Idempotency-Key echoed under another key source: %q", got)
			}
			// The Idempotency-Key header is not this route's key.
			other := e.send(body, h, "msg_2", idemhttp.HeaderKey, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
			shop := e.send(body, h, "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-Sender", "shopify")
			if other.header.Get("Idempotent-Replayed") != "" || shop.header.Get("Idempotent-Replayed") != "" || e.effects.Load() != 3 {
				t.Fatalf("another delivery or sender was absorbed: %+v %+v, effects %d", other, shop, e.effects.Load())
			}
			missing := e.send(body)
			if missing.status != 400 || sentProblem(t, missing) != "missing-key" || !strings.Contains(missing.body, http.CanonicalHeaderKey(h)) {
				t.Fatalf("no delivery header: %d %s", missing.status, missing.body)
			}
			twice := e.send(body, h, strings.Repeat("k", 256))
			if twice.status != 400 || sentProblem(t, twice) != "invalid-key" {
				t.Fatalf("key of 256 bytes: %d %s", twice.status, twice.body)
			}
		})
	}
}

// TestKeySourceCloudEvents: the key is (source, id), in binary and in
// structured mode.
func TestKeySourceCloudEvents(t *testing.T) {
	t.Parallel()
	e := newEventServer(t, idemhttp.WithKeySource(idemhttp.KeyFromCloudEvents()))
	binary := func(id, source, data string) sent {
		return e.send(data, "ce-specversion", "1.0", "ce-type", "com.example.order.created", "ce-id", id, "ce-source", source, "Content-Type", "application/json")
	}
	first := binary("A234-1234-1234", "/mycontext/orders", `{"order":1}`)
	again := binary("A234-1234-1234", "/mycontext/orders", `{"order":1}`)
	if again.header.Get("Idempotent-Replayed") != "true" || again.body != first.body || e.effects.Load() != 1 {
		t.Fatalf("binary redelivery: %+v then %+v", first, again)
	}
	// The same id from another source is another event.
	if s := binary("A234-1234-1234", "/mycontext/invoices", `{"order":1}`); s.header.Get("Idempotent-Replayed") != "" || e.effects.Load() != 2 {
		t.Fatalf("same id, other source absorbed: %+v", s)
	}
	// A percent-encoded attribute is decoded (HTTP binding §3.1.3.2).
	if s := binary("A234-1234-1234", "/mycontext/%6Frders", `{"order":1}`); s.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("percent-encoded source not decoded: %+v", s)
	}
	structured := func(ev string) sent {
		return e.send(ev, "Content-Type", "application/cloudevents+json; charset=utf-8")
	}
	ev := `{"specversion":"1.0","type":"com.example.ship","source":"https://example.com/shipments","id":"s-1","data":{"n":1}}`
	s1, s2 := structured(ev), structured(ev)
	if s1.status != 200 || s2.header.Get("Idempotent-Replayed") != "true" || e.effects.Load() != 3 {
		t.Fatalf("structured redelivery: %+v then %+v", s1, s2)
	}
	if s := structured(strings.Replace(ev, "example.com/shipments", "example.com/returns", 1)); s.header.Get("Idempotent-Replayed") != "" || e.effects.Load() != 4 {
		t.Fatalf("structured, same id, other source absorbed: %+v", s)
	}
	for _, c := range []struct {
		name, typ string
		send      func() sent
	}{
		{"no ce-id", "missing-key", func() sent { return e.send(`{}`, "ce-source", "/x", "ce-specversion", "1.0") }},
		{"no source", "missing-key", func() sent { return structured(`{"specversion":"1.0","id":"x"}`) }},
		{"id not a string", "invalid-key", func() sent { return structured(`{"id":5,"source":"/x"}`) }},
		{"batch", "invalid-key", func() sent {
			return e.send(`[`+ev+`]`, "Content-Type", "application/cloudevents-batch+json")
		}},
		{"not JSON", "invalid-json-body", func() sent { return structured(`{"id":`) }},
	} {
		if s := c.send(); s.status != 400 || sentProblem(t, s) != c.typ {
			t.Errorf("%s: %d %s, want 400 %s", c.name, s.status, s.body, c.typ)
		}
	}
}

// TestKeySourceJSON: a JMESPath expression over the body; two principals
// with the same field value are two keys.
func TestKeySourceJSON(t *testing.T) {
	t.Parallel()
	e := newEventServer(t, idemhttp.WithKeySource(idemhttp.KeyFromJSON("detail.id")))
	ev := `{"version":"0","detail":{"id":"evt_1","amount":10}}`
	first, again := e.send(ev), e.send(ev)
	if again.header.Get("Idempotent-Replayed") != "true" || again.body != first.body || e.effects.Load() != 1 {
		t.Fatalf("redelivery: %+v then %+v", first, again)
	}
	if s := e.send(ev, "X-Sender", "stripe"); s.header.Get("Idempotent-Replayed") != "" || e.effects.Load() != 2 {
		t.Fatalf("same field value from another principal absorbed: %+v", s)
	}
	if s := e.send(`{"detail":{"id":"evt_2","amount":10}}`); s.header.Get("Idempotent-Replayed") != "" || e.effects.Load() != 3 {
		t.Fatalf("another event absorbed: %+v", s)
	}
	for _, c := range []struct{ body, typ string }{
		{`{"detail":{}}`, "missing-key"},
		{``, "missing-key"},
		{`{"detail":{"id":""}}`, "invalid-key"},
		{`not json`, "invalid-json-body"},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), "invalid-json-body"},
	} {
		if s := e.send(c.body); s.status != 400 || sentProblem(t, s) != c.typ {
			t.Errorf("%q: %d %s, want 400 %s", c.body, s.status, s.body, c.typ)
		}
	}
	// A number or a list is keyed by its canonical JSON.
	n := newEventServer(t, idemhttp.WithKeySource(idemhttp.KeyFromJSON("[order, line]")))
	n.send(`{"order": 12, "line": 1}`)
	// The same key (canonical [12,1]) with another raw body: refused, not run again.
	if s := n.send(`{"line":1.0,"order":1.2e1}`); s.status != 422 || n.effects.Load() != 1 {
		t.Fatalf("same canonical key, other raw body: %+v, effects %d", s, n.effects.Load())
	}
}

// TestKeySourceInvalid: options refuse what cannot work.
func TestKeySourceInvalid(t *testing.T) {
	t.Parallel()
	ms := dbtest.MemStore(t)
	for _, o := range []idemhttp.Option{
		idemhttp.WithKeySource(idemhttp.KeyFromHeader("")),
		idemhttp.WithKeySource(idemhttp.KeyFromHeader("a b")),
		idemhttp.WithKeySource(idemhttp.KeyFromJSON("")),
		idemhttp.WithKeySource(idemhttp.KeyFromJSON("detail.[")),
		idemhttp.WithBodyFingerprint(idemhttp.JSONFields()),
		idemhttp.WithBodyFingerprint(idemhttp.JSONFields("a", "b..")),
	} {
		if _, err := idemhttp.New(ms, o); err == nil {
			t.Errorf("accepted an invalid option")
		}
	}
}

// TestKeySourceOptional: WithRequired(false) lets a request without the
// key pass through unprotected, body intact.
func TestKeySourceOptional(t *testing.T) {
	t.Parallel()
	e := newEventServer(t, idemhttp.WithKeySource(idemhttp.KeyFromJSON("id")), idemhttp.WithRequired(false))
	a, b := e.send(`{"other":1}`), e.send(`{"other":1}`)
	if a.status != 200 || b.header.Get("Idempotent-Replayed") != "" || e.effects.Load() != 2 || !strings.HasSuffix(a.body, "of 11 bytes") {
		t.Fatalf("optional key: %+v %+v", a, b)
	}
}

// TestWebhookOutcomes is the table of docs/webhooks.md: what a sender that
// retries on any non-2xx gets back for each outcome.
func TestWebhookOutcomes(t *testing.T) {
	t.Parallel()
	e := newEventServer(t, idemhttp.WithKeySource(idemhttp.KeyFromHeader("webhook-id")))
	e.status = http.StatusAccepted
	body := `{"type":"invoice.paid"}`
	if s := e.send(body, "webhook-id", "msg_1"); s.status != 202 || s.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("new: %+v, want the upstream's 202", s)
	}
	if s := e.send(body, "webhook-id", "msg_1"); s.status != 202 || s.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %+v, want the stored 202", s)
	}
	if s := e.send(`{"type":"invoice.voided"}`, "webhook-id", "msg_1"); s.status != 422 || sentProblem(t, s) != "key-reused" {
		t.Fatalf("mismatch: %+v, want 422", s)
	}
	e.block, e.started = make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/hook", strings.NewReader(body))
		req.Header.Set("X-Sender", "github")
		req.Header.Set("webhook-id", "msg_2")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	select {
	case <-e.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never started")
	}
	s := e.send(body, "webhook-id", "msg_2")
	close(e.block)
	wg.Wait()
	if s.status != 409 || sentProblem(t, s) != "in-progress" || s.header.Get("Retry-After") == "" {
		t.Fatalf("in progress: %+v, want 409 with Retry-After", s)
	}
	e.store.down.Store(true)
	if s := e.send(body, "webhook-id", "msg_3"); s.status != 503 || sentProblem(t, s) != "store-unavailable" || s.header.Get("Retry-After") == "" {
		t.Fatalf("store down: %+v, want 503 with Retry-After", s)
	}
	if n := e.effects.Load(); n != 2 {
		t.Fatalf("effects %d, want 2", n)
	}
}
