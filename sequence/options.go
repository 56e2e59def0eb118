package sequence

import (
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
)

// DefaultIdleExpiry is how long a (producer, partition) may stay silent
// before a Tracker forgets it: Kafka's producer.id.expiration.ms default.
const DefaultIdleExpiry = 24 * time.Hour

// DefaultTable is the table SQLMarks uses unless WithTable names another.
const DefaultTable = "idem_sequence_marks"

// Option configures NewTracker or NewSQLMarks. Options are validated once,
// by the constructor; an option that does not apply to the value being built
// is an error wrapping idem.ErrInvalidOption rather than being ignored.
type Option func(*config) error

type config struct {
	idle    time.Duration
	idleSet bool

	table    string
	tableSet bool
}

// WithIdleExpiry sets how long a (producer, partition) may go without an
// accepted batch before a Tracker forgets it. d must be positive. Tracker
// only.
func WithIdleExpiry(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("sequence: idle expiry %v must be positive: %w", d, idem.ErrInvalidOption)
		}
		c.idle, c.idleSet = d, true
		return nil
	}
}

// WithTable names the table SQLMarks reads and writes (default
// DefaultTable). The name must be a plain SQL identifier, optionally
// qualified by a schema on PostgreSQL and MySQL, because it is spliced into
// SQL text; NewSQLMarks checks it with the dialect's ValidateIdentifier.
// SQLMarks only.
func WithTable(name string) Option {
	return func(c *config) error {
		c.table, c.tableSet = name, true
		return nil
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{idle: DefaultIdleExpiry, table: DefaultTable}
	err := option.Apply("sequence", &c, opts)
	return c, err
}
