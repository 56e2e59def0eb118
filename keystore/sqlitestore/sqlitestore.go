package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// checkpointEvery is how often Open's checkpointer runs.
const checkpointEvery = 100 * time.Millisecond

// Store is a [sqlstore.Store] on a SQLite file that it opened and owns, with
// its checkpointer. Every method of sqlstore.Store is promoted; Close also
// stops the checkpointer and closes the database.
type Store struct {
	*sqlstore.Store
	db     *sql.DB
	stop   func() error
	ckpt   *checkpointer
	once   sync.Once
	closed error
}

// Open opens (or creates) the SQLite file at path as a key store, the way
// idem serve does: one connection in WAL mode (sqldialect.SQLiteDSN) with
// checkpoints left to a checkpointer on a second connection, which runs
// every 100 ms until [Store.Close]. The program must register the
// modernc.org/sqlite driver ("sqlite"): import _ "modernc.org/sqlite". opts
// are the SQL store's (table, scope, result size). Open does not create the table: call Migrate once, or apply
// SchemaSQL in your own migration tool. An empty path or a bad option
// returns an error wrapping idem.ErrInvalidOption.
func Open(path string, opts ...sqlstore.Option) (*Store, error) {
	return open(path, checkpointEvery, opts...)
}

func open(path string, every time.Duration, opts ...sqlstore.Option) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#\x00") {
		return nil, fmt.Errorf("sqlitestore: path %q: want a file path without ? or #: %w", path, idem.ErrInvalidOption)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	// SQLite has one writer at a time, and every key-store call writes: one
	// connection queues them in Go rather than in SQLite's sleeping busy
	// handler (whose waits make p99s of tens of milliseconds under
	// concurrency). The store commits queued calls together.
	db.SetMaxOpenConns(1)
	s, err := sqlstore.New(db, sqldialect.SQLite, opts...)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	ckpt, stop, err := startCheckpointer(path, every)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{Store: s, db: db, stop: stop, ckpt: ckpt}, nil
}

// DB returns the store's database (one connection), for a health check or a
// read of its own. The Store owns it: do not close it.
func (s *Store) DB() *sql.DB { return s.db }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Close releases the store's statements (its scoped views' too; later calls
// return an error wrapping idem.ErrClosed), stops the checkpointer after a
// last checkpoint, so that a clean shutdown leaves the WAL copied back, and
// closes the database.
// A second Close returns the first one's result.
func (s *Store) Close() error {
	s.once.Do(func() { s.closed = errors.Join(s.Store.Close(), s.stop(), s.db.Close()) })
	return s.closed
}
