package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/ddl"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/sqldialect"
)

// ErrInvalidMessage is wrapped when Add is given a message it cannot store.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// Message is one outgoing message.
type Message struct {
	// ID is the message's stable identity, carried by every publication of
	// it (as the broker's message id: Kafka header, Nats-Msg-Id, AMQP
	// message-id). Empty: Add assigns a time-ordered random one. At most 255
	// bytes.
	ID string
	// Topic is where to publish (topic, subject, routing key). Required.
	Topic string
	// OrderingKey orders messages: those with the same ordering key are
	// published in order. Usually the aggregate id. May be empty (no
	// ordering with others). It is not an idempotency key: ID is.
	OrderingKey string
	// Payload is the message body.
	Payload []byte
	// Headers are published with the message.
	Headers map[string]string
	// Seq is the outbox's sequence number for the message, assigned on
	// insert; increasing in insertion order. Set by the relay, ignored by Add.
	Seq int64
}

// Outbox writes messages into one table. It is safe for concurrent use and
// holds no goroutines.
type Outbox struct {
	d     sqldialect.Dialect
	table string
	q     queries
}

// config is what an Outbox's options set.
type config struct {
	table string
}

// Option configures [New]. Options are checked once, by New; a bad one
// makes New return an error wrapping idem.ErrInvalidOption.
type Option func(*config) error

// WithTable sets the table name (default "idem_outbox"), a plain
// identifier.
func WithTable(name string) Option {
	return func(c *config) error { c.table = name; return nil }
}

// New returns an Outbox for the dialect.
func New(d sqldialect.Dialect, opts ...Option) (*Outbox, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	cfg := config{table: "idem_outbox"}
	if err := option.Apply("outbox", &cfg, opts); err != nil {
		return nil, err
	}
	if err := d.ValidateIdentifier(cfg.table); err != nil {
		return nil, fmt.Errorf("outbox: table: %v: %w", err, idem.ErrInvalidOption)
	}
	if d == sqldialect.MySQL {
		return nil, fmt.Errorf("outbox: MySQL is not supported yet (PostgreSQL, SQLite): %w", idem.ErrInvalidOption)
	}
	return &Outbox{d: d, table: cfg.table, q: buildQueries(d, cfg.table)}, nil
}

// SchemaSQL returns the statements that create the table, for migration
// tools.
func (o *Outbox) SchemaSQL() []string { return append([]string(nil), o.q.schema...) }

// Migrate creates the table and its index if they do not exist, running
// [Outbox.SchemaSQL] on db (a *sql.DB, *sql.Conn or *sql.Tx). Several
// processes may call it at once: on PostgreSQL the statements run in one
// transaction (db's, when db is a *sql.Tx) after a transaction-scoped
// advisory lock.
func (o *Outbox) Migrate(ctx context.Context, db sqldialect.Execer) error {
	if err := ddl.Exec(ctx, db, o.d, o.table, o.q.schema); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}

// Add writes msgs in tx, the business transaction. They become visible to
// relays when tx commits, and vanish if it rolls back. It returns the IDs,
// including those it assigned. On PostgreSQL it also notifies listeners
// (pg_notify, delivered at commit) so that relays wake at once.
func (o *Outbox) Add(ctx context.Context, tx sqldialect.Execer, msgs ...Message) ([]string, error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = NewID()
		}
		if len(m.ID) > idem.MaxKeyLen || m.Topic == "" || len(m.Topic) > 255 || len(m.OrderingKey) > 255 {
			return nil, fmt.Errorf("outbox: message %d: want an ID of at most 255 bytes, a topic of 1 to 255 bytes and an ordering key of at most 255: %w", i, ErrInvalidMessage)
		}
		var hdr []byte
		if len(m.Headers) > 0 {
			var err error
			if hdr, err = json.Marshal(m.Headers); err != nil {
				return nil, fmt.Errorf("outbox: headers: %v: %w", err, ErrInvalidMessage)
			}
		}
		if _, err := tx.ExecContext(ctx, o.q.insert, m.ID, m.Topic, m.OrderingKey, m.Payload, hdr); err != nil {
			return nil, fmt.Errorf("outbox: add: %w", err)
		}
		ids[i] = m.ID
	}
	if o.d == sqldialect.Postgres && len(msgs) > 0 {
		if _, err := tx.ExecContext(ctx, "SELECT pg_notify($1, '')", o.Channel()); err != nil {
			return nil, fmt.Errorf("outbox: notify: %w", err)
		}
	}
	return ids, nil
}

// Channel is the PostgreSQL notification channel Add notifies.
func (o *Outbox) Channel() string { return o.table + "_wakeup" }

// NewID returns a time-ordered random message id: 48 bits of Unix
// milliseconds and 80 random bits, in hex (32 characters). Time order keeps
// index inserts local.
func NewID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}

// Sweep deletes messages sent more than olderThan ago, at most batch per
// statement, until fewer than batch are deleted. Unsent messages are never
// deleted.
func (o *Outbox) Sweep(ctx context.Context, db *sql.DB, olderThan time.Duration, batch int) (int, error) {
	if olderThan <= 0 || batch <= 0 {
		return 0, fmt.Errorf("outbox: sweep: age %v and batch %d must be positive: %w", olderThan, batch, idem.ErrInvalidArgument)
	}
	age := olderThan.Microseconds()
	if o.d == sqldialect.SQLite {
		age = olderThan.Milliseconds()
	}
	total := 0
	for {
		res, err := db.ExecContext(ctx, o.q.sweep, age, batch)
		if err != nil {
			return total, fmt.Errorf("outbox: sweep: %w", err)
		}
		n, _ := res.RowsAffected()
		total += int(n)
		if n < int64(batch) {
			return total, nil
		}
	}
}
