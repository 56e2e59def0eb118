package storeurl

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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

// DefaultSnapshotEvery is how often, unless [Options] says otherwise, a
// memory:PATH store saves its snapshot besides on close: a crash loses at
// most this much (its keys' effects can run again after the restart, as
// with a plain memory store).
const DefaultSnapshotEvery = 30 * time.Second

// Options tunes [Open]. The zero value is ready to use.
type Options struct {
	// MaxResultSize is the largest result the store keeps, in bytes (0:
	// keystore.DefaultMaxResultSize). A DynamoDB item holds about 400 KB:
	// a larger value is capped there.
	MaxResultSize int
	// SnapshotEvery is how often a memory:PATH store saves its snapshot
	// besides on close (0: DefaultSnapshotEvery).
	SnapshotEvery time.Duration
	// Logger receives a memory:PATH store's failed snapshot saves (nil:
	// slog.Default()).
	Logger *slog.Logger
}

// Opened is a store opened by [Open], with its health check and the
// resources to release.
type Opened struct {
	spec  Spec
	store keystore.Store
	ping  func(context.Context) error
	close func() error
}

// Store is the key store. It is the backend's own value, so that its
// optional interfaces (keystore.Extender and the others) stay visible to
// idemhttp and the inbox.
func (o *Opened) Store() keystore.Store { return o.store }

// Spec is what was opened.
func (o *Opened) Spec() Spec { return o.spec }

// Ping asks the store's server to answer (nil at once for the memory and
// DynamoDB-less forms that have no server).
func (o *Opened) Ping(ctx context.Context) error { return o.ping(ctx) }

// Check asks the store to answer once, then whether it is ready to serve
// (keystore.Check: a key looked up, nothing changed): a store nobody
// listens on, or a SQL store whose table does not exist
// (keystore.ErrNotMigrated), is otherwise only found by the first request.
func (o *Opened) Check(ctx context.Context) error {
	if err := o.ping(ctx); err != nil {
		return err
	}
	return keystore.Check(ctx, o.store)
}

// Close releases the store's connections; a memory:PATH store saves its
// snapshot first and returns the save's error. It may be called more than
// once.
func (o *Opened) Close() error { return o.close() }

// Open opens the store spec names. The SQL stores' and DynamoDB's tables
// are created if missing (the database user needs that right); a NATS
// store that nobody serves fails here, with the store named. Redis and
// PostgreSQL connect lazily: [Opened.Check] tells whether they answer.
// Nothing stays open when Open fails.
func Open(ctx context.Context, spec Spec, opts Options) (*Opened, error) {
	maxResult := cmp.Or(opts.MaxResultSize, keystore.DefaultMaxResultSize)
	if maxResult < 0 {
		return nil, fmt.Errorf("storeurl: MaxResultSize %d must not be negative", maxResult)
	}
	o := &Opened{spec: spec, ping: func(context.Context) error { return nil }}
	switch spec.Kind {
	case Memory:
		if spec.Path != "" {
			log := opts.Logger
			if log == nil {
				log = slog.Default()
			}
			return openMemorySnapshot(spec, maxResult, cmp.Or(opts.SnapshotEvery, DefaultSnapshotEvery), log)
		}
		s, err := memstore.New(append(spec.Memory.options(), memstore.WithMaxResultSize(maxResult))...)
		if err != nil {
			return nil, err
		}
		o.store, o.close = s, s.Close
	case SQLite:
		// One connection and a checkpointer on a second one: see package
		// sqlitestore.
		s, err := sqlitestore.Open(spec.Path, sqlstore.WithMaxResultSize(maxResult))
		if err == nil {
			if err = s.Migrate(ctx); err != nil {
				s.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite store: %w", err)
		}
		o.store, o.ping, o.close = s, s.Ping, s.Close
	case Postgres:
		db, err := sql.Open("pgx", spec.URL)
		if err != nil {
			return nil, fmt.Errorf("postgres store: %w", err)
		}
		s, err := sqlstore.New(db, sqldialect.Postgres, sqlstore.WithMaxResultSize(maxResult))
		if err == nil {
			err = s.Migrate(ctx)
		}
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("postgres store: %w", err)
		}
		o.store, o.ping, o.close = s, db.PingContext, db.Close
	case Redis:
		// redis-cluster:// gets the client settings that keep a failover
		// outage under 10 s and spreads each scope over the cluster's
		// slots (docs/scale.md).
		s, rdb, err := redisstore.OpenURL(spec.URL, redisstore.WithMaxResultSize(maxResult))
		if err != nil {
			return nil, fmt.Errorf("redis store: %w", err)
		}
		o.store, o.close = s, rdb.Close
		o.ping = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	case NATS:
		s, nc, err := natsstore.OpenURL(ctx, spec.URL, natsstore.WithMaxResultSize(maxResult))
		if err != nil {
			return nil, fmt.Errorf("nats store: %w", err)
		}
		o.store = s
		o.ping = func(ctx context.Context) error {
			d := 2 * time.Second
			if dl, ok := ctx.Deadline(); ok {
				d = time.Until(dl)
			}
			return nc.FlushTimeout(d)
		}
		o.close = func() error { nc.Close(); return nil }
	case DynamoDB:
		// A larger MaxResultSize is capped at what an item holds: a
		// response above it is delivered and kept as "not stored" (410 on
		// a retry), never executed again.
		s, err := dynamostore.OpenURL(ctx, spec.URL)
		if err == nil && maxResult < s.MaxResultSize() {
			s, err = dynamostore.OpenURL(ctx, spec.URL, dynamostore.WithMaxResultSize(maxResult))
		}
		if err == nil {
			err = s.Migrate(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("dynamodb store: %w", err)
		}
		// Migrate only describes the table once it exists: a cheap,
		// authenticated call that fails when DynamoDB cannot be reached.
		o.store, o.ping, o.close = s, s.Migrate, func() error { return nil }
	default:
		return nil, fmt.Errorf("%w: unknown store kind %q (parse the URL with storeurl.Parse)", ErrInvalid, spec.Kind)
	}
	o.close = sync.OnceValue(o.close)
	return o, nil
}

// openMemorySnapshot opens a memory store restored from the snapshot at
// spec.Path (empty if there is none yet; a damaged one is refused), which
// saves it there every every and when closed. Save errors are logged;
// Close returns the last one.
func openMemorySnapshot(spec Spec, maxResult int, every time.Duration, log *slog.Logger) (*Opened, error) {
	path := spec.Path
	opts := append(spec.Memory.options(), memstore.WithMaxResultSize(maxResult))
	s, err := memstore.Load(path, opts...)
	if errors.Is(err, fs.ErrNotExist) {
		s, err = memstore.New(opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("memory store: %w (move the file away to start empty)", err)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	save := func() error {
		err := s.SaveSnapshot(path)
		if err != nil {
			log.Error("memory store: snapshot not saved", "path", path, "err", err)
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
	return &Opened{spec: spec, store: s, ping: func(context.Context) error { return nil }, close: sync.OnceValue(func() error {
		close(stop)
		<-stopped
		return errors.Join(save(), s.Close())
	})}, nil
}
