package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/dynamostore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/natsstore"
	"github.com/idem-go/idem/keystore/redisstore"
	"github.com/idem-go/idem/keystore/sqlitestore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	_ "modernc.org/sqlite"             // "sqlite"
)

// storeSpec is a parsed --store value.
type storeSpec struct {
	kind  string        // memory, sqlite, postgres, redis, nats, dynamodb
	arg   string        // path or URL
	every time.Duration // memory:PATH: how often the snapshot is saved (0: memorySnapshotEvery)
}

var errStoreSpec = errors.New("invalid --store")

// storeForms lists what --store accepts, for error messages and help.
const storeForms = "memory, memory:SNAPSHOT-PATH, sqlite:PATH, postgres://…, redis://… (rediss://), redis-cluster://host:port,host:port… (rediss-cluster://), nats://host:port,… or dynamodb://TABLE?region=…"

// parseStoreSpec accepts memory, memory:PATH (a snapshot file), sqlite:PATH, postgres://… (or
// postgresql://), redis://… (rediss://), redis-cluster://… (rediss-cluster://),
// nats://… (tls://) and dynamodb://TABLE?…. The network forms are parsed
// here, so that a bad URL is refused before anything is opened.
func parseStoreSpec(s string) (storeSpec, error) {
	switch {
	case s == "memory":
		return storeSpec{kind: "memory"}, nil
	case strings.HasPrefix(s, "memory:"):
		p := strings.TrimPrefix(s, "memory:")
		if p == "" || strings.ContainsRune(p, 0) {
			return storeSpec{}, fmt.Errorf("%w %q: want memory:PATH, the snapshot file", errStoreSpec, s)
		}
		return storeSpec{kind: "memory", arg: p}, nil
	case strings.HasPrefix(s, "sqlite:"):
		p := strings.TrimPrefix(s, "sqlite:")
		if p == "" || strings.ContainsAny(p, "?#\x00") {
			return storeSpec{}, fmt.Errorf("%w %q: want sqlite:PATH, a file path without ? or #", errStoreSpec, s)
		}
		return storeSpec{kind: "sqlite", arg: p}, nil
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		return storeSpec{kind: "postgres", arg: s}, nil
	case strings.HasPrefix(s, "redis://"), strings.HasPrefix(s, "rediss://"),
		strings.HasPrefix(s, "redis-cluster://"), strings.HasPrefix(s, "rediss-cluster://"):
		// OpenURL does no I/O: it only parses and builds the client.
		_, rdb, err := redisstore.OpenURL(s)
		if err != nil {
			return storeSpec{}, fmt.Errorf("%w %q: %v", errStoreSpec, redactURL(s), err)
		}
		rdb.Close()
		return storeSpec{kind: "redis", arg: s}, nil
	case strings.HasPrefix(s, "nats://"), strings.HasPrefix(s, "tls://"):
		return storeSpec{kind: "nats", arg: s}, nil
	case strings.HasPrefix(s, "dynamodb://"):
		if _, err := dynamostore.ParseURL(s); err != nil {
			return storeSpec{}, fmt.Errorf("%w %q: %v", errStoreSpec, redactURL(s), err)
		}
		return storeSpec{kind: "dynamodb", arg: s}, nil
	}
	return storeSpec{}, fmt.Errorf("%w %q: want %s", errStoreSpec, redactURL(s), storeForms)
}

// redactURL hides a password in error messages.
func redactURL(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if at := strings.IndexByte(s[i+3:], '@'); at >= 0 {
			return s[:i+3] + "…@" + s[i+3+at+1:]
		}
	}
	return s
}

// openedStore is a key store with its health check and its resources.
type openedStore struct {
	keystore.Store
	ping  func(context.Context) error
	close func() error
}

func openStore(ctx context.Context, spec storeSpec, maxResult int) (*openedStore, error) {
	switch spec.kind {
	case "memory":
		if spec.arg != "" {
			return openMemorySnapshot(spec.arg, maxResult, cmp.Or(spec.every, memorySnapshotEvery))
		}
		s, err := memstore.New(memstore.WithMaxResultSize(maxResult))
		if err != nil {
			return nil, err
		}
		return &openedStore{Store: s, ping: func(context.Context) error { return nil }, close: s.Close}, nil
	case "sqlite":
		// One connection and a checkpointer on a second one: see package
		// sqlitestore.
		s, err := sqlitestore.Open(spec.arg, sqlstore.WithMaxResultSize(maxResult))
		if err == nil {
			if err = s.Migrate(ctx); err != nil {
				s.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite store: %w", err)
		}
		return &openedStore{Store: s, ping: s.Ping, close: s.Close}, nil
	case "postgres":
		db, err := sql.Open("pgx", spec.arg)
		if err != nil {
			return nil, err
		}
		s, err := sqlstore.New(db, sqldialect.Postgres, sqlstore.WithMaxResultSize(maxResult))
		if err == nil {
			err = s.Migrate(ctx)
		}
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("postgres store: %w", err)
		}
		return &openedStore{Store: s, ping: db.PingContext, close: db.Close}, nil
	case "redis":
		// redis-cluster:// gets the client settings that keep a failover
		// outage under 10 s and spreads each scope over the cluster's slots
		// (docs/scale.md).
		s, rdb, err := redisstore.OpenURL(spec.arg, redisstore.WithMaxResultSize(maxResult))
		if err != nil {
			return nil, err
		}
		return &openedStore{Store: s, ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, close: rdb.Close}, nil
	case "nats":
		s, nc, err := natsstore.OpenURL(ctx, spec.arg, natsstore.WithMaxResultSize(maxResult))
		if err != nil {
			return nil, fmt.Errorf("nats store: %w", err)
		}
		ping := func(ctx context.Context) error {
			d := 2 * time.Second
			if dl, ok := ctx.Deadline(); ok {
				d = time.Until(dl)
			}
			return nc.FlushTimeout(d)
		}
		return &openedStore{Store: s, ping: ping, close: func() error { nc.Close(); return nil }}, nil
	case "dynamodb":
		// A DynamoDB item holds about 400 KB: a larger --max-response is
		// capped there, and a response above it is delivered and kept as
		// "not stored" (410 on a retry), never executed again.
		s, err := dynamostore.OpenURL(ctx, spec.arg)
		if err == nil && maxResult < s.MaxResultSize() {
			s, err = dynamostore.OpenURL(ctx, spec.arg, dynamostore.WithMaxResultSize(maxResult))
		}
		if err != nil {
			return nil, fmt.Errorf("dynamodb store: %w", err)
		}
		if err := s.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("dynamodb store: %w", err)
		}
		// Migrate only describes the table once it exists: a cheap,
		// authenticated call that fails when DynamoDB cannot be reached.
		return &openedStore{Store: s, ping: s.Migrate, close: func() error { return nil }}, nil
	}
	return nil, fmt.Errorf("%w: unknown store kind %q", errStoreSpec, spec.kind)
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
const memorySnapshotEvery = 30 * time.Second

// openMemorySnapshot opens a memory store restored from the snapshot at
// path (empty if there is none yet; a damaged one is refused), which saves
// it there every every and when closed. Save errors are logged to stderr;
// close returns the last one.
func openMemorySnapshot(path string, maxResult int, every time.Duration) (*openedStore, error) {
	s, err := memstore.Load(path, memstore.WithMaxResultSize(maxResult))
	if errors.Is(err, fs.ErrNotExist) {
		s, err = memstore.New(memstore.WithMaxResultSize(maxResult))
	}
	if err != nil {
		return nil, fmt.Errorf("memory store: %w (move the file away to start empty)", err)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	save := func() error {
		err := s.SaveSnapshot(path)
		if err != nil {
			slog.Error("memory store: snapshot not saved", "path", path, "err", err)
		}
		return err
	}
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = save()
			}
		}
	}()
	return &openedStore{Store: s, ping: func(context.Context) error { return nil }, close: sync.OnceValue(func() error {
		close(stop)
		<-stopped
		return errors.Join(save(), s.Close())
	})}, nil
}
