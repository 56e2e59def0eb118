package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/pgstore"
	"github.com/idem-go/idem/keystore/redisstore"
	"github.com/idem-go/idem/keystore/sqlitestore"
	"github.com/idem-go/idem/sqldialect"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // "sqlite"
)

// storeSpec is a parsed --store value.
type storeSpec struct {
	kind string // memory, sqlite, postgres, redis
	arg  string // path or URL
}

var errStoreSpec = errors.New("invalid --store")

// parseStoreSpec accepts memory, sqlite:PATH, postgres://… (or postgresql://)
// and redis://… (or rediss://).
func parseStoreSpec(s string) (storeSpec, error) {
	switch {
	case s == "memory":
		return storeSpec{kind: "memory"}, nil
	case strings.HasPrefix(s, "sqlite:"):
		p := strings.TrimPrefix(s, "sqlite:")
		if p == "" || strings.ContainsAny(p, "?#\x00") {
			return storeSpec{}, fmt.Errorf("%w %q: want sqlite:PATH, a file path without ? or #", errStoreSpec, s)
		}
		return storeSpec{kind: "sqlite", arg: p}, nil
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		return storeSpec{kind: "postgres", arg: s}, nil
	case strings.HasPrefix(s, "redis://"), strings.HasPrefix(s, "rediss://"):
		if _, err := redis.ParseURL(s); err != nil {
			return storeSpec{}, fmt.Errorf("%w %q: %v", errStoreSpec, redactURL(s), err)
		}
		return storeSpec{kind: "redis", arg: s}, nil
	}
	return storeSpec{}, fmt.Errorf("%w %q: want memory, sqlite:PATH, postgres://… or redis://…", errStoreSpec, redactURL(s))
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
		s, err := memstore.New(memstore.WithMaxResultSize(maxResult))
		if err != nil {
			return nil, err
		}
		return &openedStore{Store: s, ping: func(context.Context) error { return nil }, close: s.Close}, nil
	case "sqlite", "postgres":
		driver, dsn := "pgx", spec.arg
		if spec.kind == "sqlite" {
			// Checkpoints are left to a checkpointer on its own
			// connection (below), not done inside a request's commit.
			driver, dsn = "sqlite", sqldialect.SQLiteDSN(spec.arg)+sqlitestore.DSNSuffix
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return nil, err
		}
		if spec.kind == "sqlite" {
			// SQLite has one writer at a time, and every key-store call
			// writes: one connection queues them in Go rather than in
			// SQLite's sleeping busy handler (whose waits make p99s of tens
			// of milliseconds under concurrency).
			db.SetMaxOpenConns(1)
		}
		var s interface {
			keystore.Store
			Migrate(context.Context) error
		}
		if spec.kind == "sqlite" {
			s, err = sqlitestore.New(db, sqlitestore.WithMaxResultSize(maxResult))
		} else {
			s, err = pgstore.New(db, pgstore.WithMaxResultSize(maxResult))
		}
		if err == nil {
			err = s.Migrate(ctx)
		}
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("%s store: %w", spec.kind, err)
		}
		if spec.kind == "postgres" {
			return &openedStore{Store: s, ping: db.PingContext, close: db.Close}, nil
		}
		stop, err := sqlitestore.StartCheckpointer(spec.arg, 100*time.Millisecond)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite store: %w", err)
		}
		return &openedStore{Store: s, ping: db.PingContext, close: func() error { return errors.Join(stop(), db.Close()) }}, nil
	case "redis":
		opt, err := redis.ParseURL(spec.arg)
		if err != nil {
			return nil, err
		}
		rdb := redis.NewClient(opt)
		s, err := redisstore.New(rdb, redisstore.WithMaxResultSize(maxResult))
		if err != nil {
			rdb.Close()
			return nil, err
		}
		return &openedStore{Store: s, ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, close: rdb.Close}, nil
	}
	return nil, fmt.Errorf("%w: unknown store kind %q", errStoreSpec, spec.kind)
}

// checkStore asks the store to answer once, within timeout: a store nobody
// listens on (a redis:// address, say) is otherwise only found by the first
// request.
func checkStore(ctx context.Context, s *openedStore, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return s.ping(ctx)
}
