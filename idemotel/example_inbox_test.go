package idemotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/sqldialect"

	_ "modernc.org/sqlite"
)

// memTracer is the tracer of [ExampleNewTracer], exporting to memory
// (a real program exports to a collector through its TracerProvider).
func memTracer() (*tracetest.InMemoryExporter, idem.Tracer, func()) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracer, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp))
	if err != nil {
		panic(err) // only a nil option fails
	}
	return exp, tracer, func() { _ = tp.Shutdown(context.Background()) }
}

// printSpans prints each exported span's name and outcome.
func printSpans(exp *tracetest.InMemoryExporter) {
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			if string(kv.Key) == idem.AttrOutcome {
				fmt.Println(s.Name, kv.Value.AsString())
			}
		}
	}
}

// The inbox traced: a span per Process, the handler's work under it.
func Example_inbox() {
	exp, tracer, shutdown := memTracer()
	defer shutdown()

	dir, err := os.MkdirTemp("", "idemotel")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(dir, "inbox.db")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	in, err := inbox.New(db, sqldialect.SQLite, "payments", inbox.WithTracer(tracer))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := in.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for range 2 { // a delivery and its redelivery
		_, err := in.Process(ctx, "payment-1", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "SELECT 1") // the effect, in the same transaction
			return err
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	printSpans(exp)
	// Output:
	// idem.inbox.process applied
	// idem.inbox.process duplicate
}

// The HTTP middleware traced over a traced store: the request's span with
// the store calls under it.
func Example_http() {
	exp, tracer, shutdown := memTracer()
	defer shutdown()
	mem, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Close()
	mw, err := idemhttp.New(idemotel.WrapStore(mem, tracer), idemhttp.WithTracer(tracer))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 { // a request and its retry
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"sku":"a"}`))
		r.Header.Set("Idempotency-Key", "order-7")
		r.Header.Set("Authorization", "Bearer client-1")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	printSpans(exp)
	// Output:
	// idem.keystore.reserve reserved
	// idem.keystore.complete completed
	// idem.http.request executed
	// idem.keystore.reserve done
	// idem.http.request replayed
}
