// Package pglisten is the PostgreSQL [sqlstore.Listener], on pgx: give it
// to a store with [sqlstore.WithListener], and waiters (keystore.Await,
// keystore.Do's WithWait, idemhttp, idemgrpc, the idem serve proxy) wake
// as soon as the key they wait for is completed or released, by any
// process, instead of at their next poll.
//
//	db, _ := sql.Open("pgx", dsn)
//	l, _ := pglisten.New(db)
//	s, _ := sqlstore.New(db, sqldialect.Postgres, sqlstore.WithListener(l))
//
// It is a package of its own so that package sqlstore does not depend on
// pgx (a SQLite user does not link it).
package pglisten

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/retry"
	"github.com/idem-go/idem/keystore/sqlstore"
)

// Listener listens on connections of one *sql.DB opened with pgx's
// "pgx" driver (github.com/jackc/pgx/v5/stdlib). Each Listen holds one
// connection of the pool while it runs: count it in db's SetMaxOpenConns.
type Listener struct{ db *sql.DB }

var _ sqlstore.Listener = (*Listener)(nil)

// New returns a Listener on db. A nil db, or one whose driver is not
// pgx's stdlib driver, is an error wrapping idem.ErrInvalidOption.
func New(db *sql.DB) (*Listener, error) {
	if db == nil {
		return nil, fmt.Errorf("pglisten: nil *sql.DB: %w", idem.ErrInvalidOption)
	}
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return nil, fmt.Errorf("pglisten: %T is not pgx's driver; open the database with sql.Open(\"pgx\", dsn) after importing github.com/jackc/pgx/v5/stdlib: %w", db.Driver(), idem.ErrInvalidOption)
	}
	return &Listener{db: db}, nil
}

// reconnect spaces the attempts to listen again on a lost connection.
var reconnect = retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}

// Listen implements [sqlstore.Listener]: it takes a connection from the
// pool, runs LISTEN channel on it and returns once that has succeeded
// (or with its error, or ctx's), then calls fn with each notification's
// payload from one goroutine. A lost connection is replaced (with
// backoff) and fn("") called once it listens again. stop ends it and
// waits for the goroutine; the connection is closed, not returned to the
// pool.
func (l *Listener) Listen(ctx context.Context, channel string, fn func(payload string)) (func(), error) {
	lctx, cancel := context.WithCancel(context.Background())
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(lctx, channel, fn, ready)
	}()
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			<-done
			return nil, fmt.Errorf("pglisten: listen %q: %w", channel, err)
		}
	case <-ctx.Done():
		cancel()
		<-done
		return nil, fmt.Errorf("pglisten: listen %q: %w", channel, ctx.Err())
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }, nil
}

// run listens until ctx ends, reconnecting; the first outcome goes to
// ready, and a first connection that fails ends it.
func (l *Listener) run(ctx context.Context, channel string, fn func(string), ready chan<- error) {
	first := true
	for attempt := 0; ; attempt++ {
		err := l.session(ctx, channel, fn, func() {
			if first {
				first = false
				ready <- nil
			} else {
				fn("") // notifications may have been lost while away
			}
			attempt = 0
		})
		if ctx.Err() != nil {
			if first {
				ready <- ctx.Err()
			}
			return
		}
		if first {
			ready <- err
			return
		}
		if reconnect.Wait(ctx, attempt) != nil {
			return
		}
	}
}

// session listens on one connection until it fails or ctx ends.
func (l *Listener) session(ctx context.Context, channel string, fn func(string), listening func()) error {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var cause error
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			cause = fmt.Errorf("%T is not a pgx connection", dc)
			return cause
		}
		pc := sc.Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			cause = err
			return driver.ErrBadConn
		}
		listening()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				// The connection listens, or was cut half-way through a
				// read: never hand it back to the pool.
				cause = err
				return driver.ErrBadConn
			}
			fn(n.Payload)
		}
	})
	if cause != nil {
		return cause
	}
	return err
}
