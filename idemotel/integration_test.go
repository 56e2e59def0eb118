package idemotel_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// The inbox on SQLite, traced through OpenTelemetry into memory: each
// outcome's span, the handler's span under it, the batch counts, and no
// key text anywhere.
func TestInboxSpans(t *testing.T) {
	r := newRecorder(t)
	db := testenv.Open(t, "sqlite", testenv.SQLiteDSN(t))
	in := inboxtest.Migrated(t, db, sqldialect.SQLite, "payments", inbox.WithTracer(r.t))
	ctx := context.Background()
	const key = "payment-4417-secret"
	tracer := r.tp.Tracer("handler")
	handler := func(ctx context.Context, tx *sql.Tx) error {
		_, s := tracer.Start(ctx, "charge")
		defer s.End()
		return nil
	}
	fail := errors.New("card declined for " + key + "-2") // a handler naming its key
	for _, step := range []struct {
		m   inbox.Message
		fn  inbox.Handler
		err error
	}{
		{inbox.Message{Key: key, Fingerprint: []byte("a")}, handler, nil},
		{inbox.Message{Key: key, Fingerprint: []byte("a")}, handler, nil},
		{inbox.Message{Key: key, Fingerprint: []byte("b")}, handler, idem.ErrFingerprintMismatch},
		{inbox.Message{Key: key + "-2"}, func(context.Context, *sql.Tx) error { return fail }, fail},
	} {
		if _, err := in.ProcessMessage(ctx, step.m, step.fn); !errors.Is(err, step.err) {
			t.Fatalf("%s: %v, want %v", step.m.Key, err, step.err)
		}
	}
	if _, err := in.ProcessBatch(ctx, []inbox.Message{{Key: key}, {Key: key + "-3"}, {Key: ""}}, func(context.Context, *sql.Tx, inbox.Message) error { return nil }); err != nil {
		t.Fatal(err)
	}

	spans := r.named(idem.OpInboxProcess)
	if len(spans) != 4 {
		t.Fatalf("%d process spans", len(spans))
	}
	for i, want := range []string{"applied", "duplicate", "mismatch", "error"} {
		wantAttr(t, spans[i], idem.AttrOutcome, want)
		wantAttr(t, spans[i], idem.AttrConsumer, "payments")
		wantAttr(t, spans[i], idem.AttrTxAttempt, int64(1))
		if spans[i].SpanKind != trace.SpanKindInternal {
			t.Errorf("span %d kind %v", i, spans[i].SpanKind)
		}
	}
	wantAttr(t, spans[0], idem.AttrKeyHash, idemotel.KeyHash(key))
	if spans[3].Status.Code != codes.Error || spans[2].Status.Code == codes.Error {
		t.Fatalf("statuses: mismatch %v, handler error %v", spans[2].Status, spans[3].Status)
	}
	charges := r.named("charge")
	if len(charges) != 1 || charges[0].Parent.SpanID() != spans[0].SpanContext.SpanID() {
		t.Fatalf("the handler's span is not under the applied call: %v", charges)
	}
	b := r.named(idem.OpInboxProcessBatch)
	if len(b) != 1 {
		t.Fatalf("%d batch spans", len(b))
	}
	wantAttr(t, b[0], idem.AttrOutcome, "committed")
	wantAttr(t, b[0], idem.AttrBatchSize, int64(3))
	wantAttr(t, b[0], idem.AttrApplied, int64(1))
	wantAttr(t, b[0], idem.AttrDuplicate, int64(1))
	wantAttr(t, b[0], idem.AttrFailed, int64(1))
	noText(t, r.spans(), key)
}

// The HTTP middleware over a wrapped store: the request's span, the store
// calls under it, the client's key hashed, nothing of the key or body.
func TestHTTPSpans(t *testing.T) {
	r := newRecorder(t)
	store := idemotel.WrapStore(dbtest.MemStore(t), r.t)
	m, err := idemhttp.New(store, idemhttp.WithTracer(r.t))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("order placed"))
	}))
	const key = "client-key-9f8e7d6c"
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for range 2 {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader("body-with-card-4242"))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Traceparent", tp)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	reqs := r.named(idem.OpHTTPRequest)
	if len(reqs) != 2 {
		t.Fatalf("%d request spans", len(reqs))
	}
	wantAttr(t, reqs[0], idem.AttrOutcome, "executed")
	wantAttr(t, reqs[1], idem.AttrOutcome, "replayed")
	wantAttr(t, reqs[0], idem.AttrKeyHash, idemotel.KeyHash(key))
	if reqs[0].SpanKind != trace.SpanKindServer || len(reqs[0].Links) != 1 {
		t.Fatalf("kind %v, links %v", reqs[0].SpanKind, reqs[0].Links)
	}
	var under []string
	for _, s := range r.spans() {
		if s.Parent.SpanID() == reqs[0].SpanContext.SpanID() {
			o, _ := attr(s, idem.AttrOutcome)
			under = append(under, s.Name+":"+o.AsString())
		}
	}
	if got := strings.Join(under, ","); got != "idem.keystore.reserve:reserved,idem.keystore.complete:completed" {
		t.Fatalf("under the executed request: %s", got)
	}
	noText(t, r.spans(), key)
	noText(t, r.spans(), "4242")
	noText(t, r.spans(), "alice")
}

// The proxy sends the upstream the request span's trace context (the
// upstream's spans become its children), not the client's, which the span
// links.
func TestProxyPropagates(t *testing.T) {
	r := newRecorder(t)
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got <- req.Header.Get("Traceparent")
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	p, err := idemhttp.NewProxy(target, idemotel.WrapStore(dbtest.MemStore(t), r.t), idemhttp.WithTracer(r.t))
	if err != nil {
		t.Fatal(err)
	}
	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest("POST", "/pay", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "pay-1")
	req.Header.Set("Authorization", "Bearer c")
	req.Header.Set("Traceparent", client)
	p.ServeHTTP(httptest.NewRecorder(), req)
	sent := <-got
	span := r.named(idem.OpHTTPRequest)[0]
	want := "00-" + span.SpanContext.TraceID().String() + "-" + span.SpanContext.SpanID().String() + "-01"
	if sent != want {
		t.Fatalf("upstream got traceparent %q, want the request span's %q", sent, want)
	}
	if len(span.Links) != 1 || span.Links[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("the client's trace is not linked: %v", span.Links)
	}
}
