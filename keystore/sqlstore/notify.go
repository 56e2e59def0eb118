package sqlstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// How waiters learn of a change on PostgreSQL: a store given a
// [Listener] ([WithListener]) runs Complete and Release in a form that
// calls pg_notify on the table's channel, in the same statement, with the
// key's notification id (a hash of scope and key, never the key) when it
// changed a row; PostgreSQL delivers it at commit, and not at all if the
// transaction rolls back. The store listens on one connection, shared by
// its scopes and waiters, only while somebody waits, and wakes the waiters
// of the id.
//
// Only such stores notify: PostgreSQL serialises the commits of
// notifying transactions (a lock held from the notification's queueing
// to the end of the commit), which cost Reserve+Complete 1.2 to 1.8 times
// its time at 8 callers when measured (docs/keystore.md), so a store
// without a listener keeps the plain statements. Give every process that
// shares a table the listener, since the waiter may be another process
// than the holder.

// Listener delivers the payloads of PostgreSQL notifications on one
// channel. Package keystore/sqlstore/pglisten implements it with pgx; it
// is an interface so that sqlstore does not depend on a driver.
type Listener interface {
	// Listen runs LISTEN channel on a connection of its own and returns
	// once the database listens (or an error), then calls fn with the
	// payload of each notification, from one goroutine, until stop is
	// called; stop returns once that goroutine has ended. When the
	// connection is lost, Listen reconnects and listens again, and calls
	// fn("") after it (notifications may have been lost meanwhile).
	Listen(ctx context.Context, channel string, fn func(payload string)) (stop func(), err error)
}

// WithListener makes the store (PostgreSQL only) a [keystore.Notifier]:
// its Complete and Release notify the table's channel, and
// keystore.Await, and everything that waits through it, wakes a waiter as
// soon as the key's holder completes or releases it, instead of at its
// next poll. Give it to every process sharing the table: a holder whose
// store has none does not notify, and its waiters elsewhere poll. Without
// it, and on SQLite, Notify fails with errors.ErrUnsupported and waiters
// poll.
func WithListener(l Listener) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("sqlstore: nil listener: %w", idem.ErrInvalidOption)
		}
		c.listener = l
		return nil
	}
}

// notifyChannel is the channel of table: "idem:" and its name, schema
// included, or a hash of the name when that would pass PostgreSQL's
// 63-byte limit. Table names are plain identifiers (tableNames).
func notifyChannel(table string) string {
	if c := "idem:" + table; len(c) <= 63 {
		return c
	}
	h := sha256.Sum256([]byte(table))
	return "idem:" + hex.EncodeToString(h[:16])
}

// notifyID is the payload that names key in s's scope: 128 bits of a hash
// of scope and key, in hex.
func (s *Store) notifyID(key string) string {
	h := sha256.New()
	h.Write([]byte(s.scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Notify implements [keystore.Notifier] for a PostgreSQL store given a
// [Listener]: the channel is closed when a Complete or Release of key in
// this scope commits (by any process whose store has a listener), or when
// the listener reconnects.
// It returns once the database listens (the first waiter starts the
// listening connection; later waiters share it), or ctx's error. Without
// a listener, or on SQLite, it fails with errors.ErrUnsupported.
func (s *Store) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return nil, nil, fmt.Errorf("sqlstore: notify: %w", err)
	}
	if s.wake == nil {
		return nil, nil, fmt.Errorf("sqlstore: notify: %v store without WithListener: %w", s.d, errors.ErrUnsupported)
	}
	return s.wake.watch(ctx, s.notifyID(key))
}

// wake is a store's listening connection and its waiters, shared by its
// scoped views.
type wake struct {
	l       Listener
	channel string
	w       keystore.Watchers

	mu  sync.Mutex
	cur *session // nil: not listening
}

// session is one Listen call.
type session struct {
	ready chan struct{} // closed once stop or err is set
	stop  func()
	err   error
}

func newWake(d sqldialect.Dialect, l Listener, table string) *wake {
	if l == nil || d != sqldialect.Postgres {
		return nil
	}
	return &wake{l: l, channel: notifyChannel(table)}
}

func (p *wake) watch(ctx context.Context, id string) (<-chan struct{}, func(), error) {
	ch, stop, _ := p.w.Add(id, p.idle)
	p.mu.Lock()
	s := p.cur
	if s == nil {
		s = &session{ready: make(chan struct{})}
		p.cur = s
		go p.start(s)
	}
	p.mu.Unlock()
	select {
	case <-s.ready:
		if s.err != nil {
			stop()
			return nil, nil, fmt.Errorf("sqlstore: notify: listen: %w", s.err)
		}
		return ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("sqlstore: notify: %w", ctx.Err())
	}
}

// start listens for s; a session that fails is dropped, so that the next
// waiter tries again, and one that nobody needs any more is stopped.
func (p *wake) start(s *session) {
	ctx, cancel := context.WithTimeout(context.Background(), keystore.CallTimeout)
	stop, err := p.l.Listen(ctx, p.channel, p.deliver)
	cancel()
	p.mu.Lock()
	s.stop, s.err = stop, err
	idle := p.cur == s && (err != nil || !p.w.Watching())
	if idle {
		p.cur = nil
	}
	p.mu.Unlock()
	close(s.ready)
	if idle && err == nil {
		stop()
	}
}

// idle stops listening once the last waiter has gone (a session still
// starting is stopped by start).
func (p *wake) idle() {
	p.mu.Lock()
	s := p.cur
	if s == nil || p.w.Watching() {
		p.mu.Unlock()
		return
	}
	select {
	case <-s.ready:
	default:
		p.mu.Unlock()
		return
	}
	p.cur = nil
	p.mu.Unlock()
	if s.stop != nil {
		s.stop()
	}
}

// deliver wakes the waiters a notification names: all of them for "",
// which the listener sends after reconnecting.
func (p *wake) deliver(payload string) {
	if payload == "" {
		p.w.SignalAll()
		return
	}
	p.w.Signal(payload)
}
