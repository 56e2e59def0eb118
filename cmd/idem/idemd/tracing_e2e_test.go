package main

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemotel"
)

// otlpReceiver is an OTLP/HTTP trace endpoint that keeps what it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	raw   [][]byte
	spans []*tracepb.Span
	res   []string // service.name of each resource
	srv   *httptest.Server
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	o := &otlpReceiver{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("OTLP receiver: %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.raw = append(o.raw, body)
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					o.res = append(o.res, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				o.spans = append(o.spans, ss.Spans...)
			}
		}
		o.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func strAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// idem serve --otlp-endpoint exports a span per keyed request, with the
// store calls under it, and flushes them on SIGTERM: the batch delay is a
// minute, so only the flush on exit can have sent them. No span carries
// the client's key.
func TestServeExportsSpans(t *testing.T) {
	rcv := newOTLPReceiver(t)
	var sent []string // the traceparent of each upstream call
	var sentMu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sentMu.Lock()
		sent = append(sent, r.Header.Get("Traceparent"))
		sentMu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
	p := startServe(t, up.URL, "memory", "--otlp-endpoint", strings.TrimPrefix(rcv.srv.URL, "http://"), "--otlp-insecure")
	const key = "e2e-secret-key-5f1d"
	first := post(t, p.url, "/orders", key, `{"card":"4242"}`)
	second := post(t, p.url, "/orders", key, `{"card":"4242"}`)
	if first.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("statuses %d, %d (replayed %q)", first.status, second.status, second.header.Get("Idempotent-Replayed"))
	}
	p.terminate(t)

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	var reqs []*tracepb.Span
	for _, s := range rcv.spans {
		byID[string(s.SpanId)] = s
		if s.Name == idem.OpHTTPRequest {
			reqs = append(reqs, s)
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("%d request spans exported, want 2 (of %d spans)", len(reqs), len(rcv.spans))
	}
	for i, want := range []string{"executed", "replayed"} {
		if got := strAttr(reqs[i], idem.AttrOutcome); got != want {
			t.Errorf("request %d: outcome %q, want %q", i, got, want)
		}
		if got := strAttr(reqs[i], idem.AttrRoute); got != "default" {
			t.Errorf("request %d: route %q", i, got)
		}
		if got := strAttr(reqs[i], idem.AttrKeyHash); got != idemotel.KeyHash(key) {
			t.Errorf("request %d: key hash %q, want %q", i, got, idemotel.KeyHash(key))
		}
		if reqs[i].Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("request %d: kind %v", i, reqs[i].Kind)
		}
	}
	// The one upstream call carried the executed request's span as its
	// parent.
	sentMu.Lock()
	if want := "00-" + hexID(reqs[0].TraceId) + "-" + hexID(reqs[0].SpanId) + "-01"; len(sent) != 1 || sent[0] != want {
		t.Errorf("upstream calls carried %q, want one with %q", sent, want)
	}
	sentMu.Unlock()
	var under []string
	for _, s := range rcv.spans {
		if par, ok := byID[string(s.ParentSpanId)]; ok && par == reqs[0] {
			under = append(under, s.Name+":"+strAttr(s, idem.AttrOutcome))
		}
	}
	if got := strings.Join(under, ","); got != "idem.keystore.reserve:reserved,idem.keystore.complete:completed" {
		t.Errorf("under the executed request: %q", got)
	}
	if len(rcv.res) == 0 || rcv.res[0] != "idem-serve" {
		t.Errorf("service.name %v", rcv.res)
	}
	for _, b := range rcv.raw {
		for _, secret := range []string{key, "4242", "e2e-client"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("the exported spans hold %q", secret)
			}
		}
	}
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

func TestServeOTLPEndpointRefused(t *testing.T) {
	out, err := runServeExit(t, "--upstream", "http://127.0.0.1:1", "--store", "memory", "--otlp-endpoint", "no-port")
	if err == nil || !strings.Contains(out, "--otlp-endpoint") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
}

// A collector that is down costs spans, not requests: keyed requests are
// answered as usual, and SIGTERM still ends the process promptly (the
// flush gives up after 5 s).
func TestServeOTLPCollectorDown(t *testing.T) {
	up := newUpstream(t)
	p := startServe(t, up.srv.URL, "memory", "--otlp-endpoint", deadAddr(t), "--otlp-insecure")
	for i, want := range []string{"", "true"} {
		r := post(t, p.url, "/orders", "down-1", "x")
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != want {
			t.Fatalf("request %d: status %d, replayed %q", i, r.status, r.header.Get("Idempotent-Replayed"))
		}
	}
	start := time.Now()
	p.terminate(t) // its collector is down: the flush must not hold the exit
	if took := time.Since(start); took > 12*time.Second {
		t.Fatalf("exit took %v", took)
	}
	if up.count("/orders") != 1 {
		t.Fatalf("upstream ran %d times", up.count("/orders"))
	}
}
