package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storeurl"
)

// storeSpec is a parsed --store value. The forms, their parsing and the
// opening of each kind of store are package storeurl's, shared with the
// Caddy module (adapters/idemcaddy).
type storeSpec struct {
	kind  string        // memory, sqlite, postgres, redis, nats, dynamodb
	arg   string        // path or URL
	every time.Duration // memory:PATH: how often the snapshot is saved (0: memorySnapshotEvery)
	url   storeurl.Spec
}

// errStoreSpec is wrapped by every error of parseStoreSpec.
var errStoreSpec = storeurl.ErrInvalid

// storeForms lists what --store accepts, for error messages and help.
const storeForms = storeurl.Forms

// parseStoreSpec is storeurl.Parse (no I/O: a bad URL is refused before
// anything is opened).
func parseStoreSpec(s string) (storeSpec, error) {
	u, err := storeurl.Parse(s)
	if err != nil {
		return storeSpec{}, err
	}
	arg := u.URL
	if u.Kind == storeurl.Memory || u.Kind == storeurl.SQLite {
		arg = u.Path
	}
	return storeSpec{kind: string(u.Kind), arg: arg, url: u}, nil
}

// redactURL hides a password in error messages.
func redactURL(s string) string { return storeurl.Redact(s) }

// openedStore is a key store with its health check and its resources.
type openedStore struct {
	keystore.Store
	ping  func(context.Context) error
	close func() error
}

// openStore opens spec with storeurl.Open; Store is the backend's own
// value, so that its optional interfaces (lease renewal) stay visible.
func openStore(ctx context.Context, spec storeSpec, maxResult int) (*openedStore, error) {
	o, err := storeurl.Open(ctx, spec.url, storeurl.Options{MaxResultSize: maxResult, SnapshotEvery: cmp.Or(spec.every, memorySnapshotEvery)})
	if err != nil {
		return nil, err
	}
	return &openedStore{Store: o.Store(), ping: o.Ping, close: o.Close}, nil
}

// checkStore asks the store to answer once, within timeout, then whether it
// is ready to serve (keystore.Check: a key looked up, nothing changed): a
// store nobody listens on (a redis:// address, say), or a SQL store whose
// table does not exist (keystore.ErrNotMigrated), is otherwise only found
// by the first request.
func checkStore(ctx context.Context, s *openedStore, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.ping(ctx); err != nil {
		return err
	}
	return keystore.Check(ctx, s.Store)
}

// startupStoreCheck is idem serve's check of its store at start-up
// (--store-check): nil to start; the error that stops it with
// --store-check=fail; with --store-check=warn, the problem is logged and it
// starts anyway.
func startupStoreCheck(ctx context.Context, log *slog.Logger, s *openedStore, f serveFlags) error {
	err := checkStore(ctx, s, f.storeTimeout)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, keystore.ErrNotMigrated):
		// idem serve migrates the SQL stores it opens: a table missing
		// now was dropped since, or is not where the connection looks.
		const fix = "restart idem serve, which creates the table when it opens the store (its database user needs the right to create tables), or apply the store's SchemaSQL with your migration tool; check that --store names the database you meant"
		if f.storeCheck == "fail" {
			return fmt.Errorf("serve: --store %s is not migrated (its table does not exist): %s (or pass --store-check=warn to start anyway): %w", redactURL(f.store), fix, err)
		}
		log.Error("STORE NOT MIGRATED: starting anyway (--store-check=warn); keyed requests get 500 store-not-migrated until it is: "+fix, "store", redactURL(f.store), "err", err)
		return nil
	case f.storeCheck == "fail":
		return fmt.Errorf("serve: --store %s does not answer (start it, or pass --store-check=warn to start anyway): %w", redactURL(f.store), err)
	}
	log.Error("STORE DOES NOT ANSWER: starting anyway (--store-check=warn); keyed requests get 503 and /readyz is unready until it does", "store", redactURL(f.store), "err", err)
	return nil
}

// memorySnapshotEvery is how often, by default (idem serve
// --snapshot-every), a memory:PATH store saves its snapshot besides on
// close: a crash loses at most this much (its keys' effects can run again
// after the restart, as with a plain memory store).
const memorySnapshotEvery = storeurl.DefaultSnapshotEvery
