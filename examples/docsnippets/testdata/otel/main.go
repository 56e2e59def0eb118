// Mirror of the block of docs/operations.md, "Tracing". main runs it on a
// memstore and a SQLite pool (inbox.New does no I/O).
//
//docsnippets:run
package main

import (
	"context"
	"database/sql"
	"log"
	"net/http"

	_ "modernc.org/sqlite"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/sqldialect"
)

func traced(ctx context.Context, store keystore.Store, db *sql.DB, serve func(*idemhttp.Middleware, *inbox.Inbox) error) error {
	t, err := idemotel.NewTracer() // otel.GetTracerProvider(), otel.GetTextMapPropagator()
	if err != nil {
		return err
	}
	store = idemotel.WrapStore(store, t)                   // Reserve, Complete, Release, Extend
	mw, err := idemhttp.New(store, idemhttp.WithTracer(t)) // or NewProxy
	if err != nil {
		return err
	}
	in, err := inbox.New(db, sqldialect.Postgres, "orders", inbox.WithTracer(t))
	if err != nil {
		return err
	}
	return serve(mw, in) // your HTTP handlers and consumers
}

func main() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN("app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	serve := func(mw *idemhttp.Middleware, in *inbox.Inbox) error {
		_ = mw.Handler(http.NotFoundHandler())
		_ = in.Consumer()
		return nil
	}
	if err := traced(context.Background(), store, db, serve); err != nil {
		log.Fatal(err)
	}
}
