package inbox

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/internal/retry"
	"github.com/idem-go/idem/sqldialect"
)

// Option configures an [Inbox]. Options are validated once, by [New].
type Option func(*config) error

type config struct {
	table      string
	horizon    time.Duration
	retention  time.Duration
	maxRetries int
	backoff    retry.Backoff
	logger     *slog.Logger
	hooks      Hooks
	tracer     idem.Tracer   // nil: no spans (trace.go)
	layout     Layout        // for new tables; 0: LayoutBuckets where supported
	width      time.Duration // bucket width for new tables; 0: derived
	keyText    bool
	// filterBytes bounds the lookup filters' memory (internal/engine/bucket/filter.go).
	filterBytes int64
	noPack      bool // WithBucketPacking(false) (internal/engine/bucketsql/pack.go)
	// replication receives what Migrate's replication check found
	// (replication.go); nil: only logged.
	replication func(sqldialect.Replication)
	// wait is WithWaitReplicas's (waitreplicas.go); Standbys 0: none.
	wait sqldialect.ReplicaWait
}

func defaultConfig() config {
	return config{
		table:       "idem_inbox",
		maxRetries:  10,
		backoff:     retry.Backoff{Min: 2 * time.Millisecond, Max: 250 * time.Millisecond},
		logger:      slog.New(slog.DiscardHandler),
		filterBytes: 256 << 20,
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("inbox: "+format+": %w", append(args, idem.ErrInvalidOption)...)
}

// WithTable sets the key table's name (default "idem_inbox"). It must be a
// plain identifier, or schema.table on PostgreSQL and MySQL.
func WithTable(name string) Option {
	return func(c *config) error { c.table = name; return nil }
}

// WithRedeliveryHorizon declares the longest time after which a duplicate
// can still arrive (broker retention or redelivery window plus client retry
// horizon). New rejects a [WithRetention] shorter than it. Migrate, or the
// Inbox's first use, records it for the consumer in the horizon table
// (raising, never lowering, what is recorded), and every Sweep of the
// consumer refuses to delete rows younger than the largest recorded
// horizon, including Sweeps by Inbox values built without this option. To
// lower it, see [Inbox.LowerRedeliveryHorizon].
func WithRedeliveryHorizon(d time.Duration) Option {
	return option.Check("inbox", d > 0, func(c *config) { c.horizon = d }, "redelivery horizon %v must be positive", d)
}

// WithRetention sets how long keys are kept; [Inbox.SweepExpired] uses it.
// It must be at least the redelivery horizon when one is set.
func WithRetention(d time.Duration) Option {
	return option.Check("inbox", d > 0, func(c *config) { c.retention = d }, "retention %v must be positive", d)
}

// WithRetry bounds the retries of a transaction that failed with a
// serialization failure, deadlock or busy database: at most n further
// attempts, with full-jitter exponential backoff between min and max.
// n == 0 disables retries. Default: 10 attempts, 2 ms to 250 ms.
func WithRetry(n int, min, max time.Duration) Option {
	set := func(c *config) { c.maxRetries, c.backoff = n, retry.Backoff{Min: min, Max: max} }
	return option.Check("inbox", n >= 0 && min > 0 && max >= min, set, "retry (%d, %v, %v): want n >= 0 and 0 < min <= max", n, min, max)
}

// WithLayout chooses the layout of a table that Migrate creates (default:
// [LayoutBuckets]). An existing table keeps its layout whatever this
// option says; [Inbox.MigrateLayout] moves a rows table to buckets.
func WithLayout(l Layout) Option {
	return option.Check("inbox", l == LayoutBuckets || l == LayoutRows, func(c *config) { c.layout = l }, "unknown layout %v", l)
}

// WithBucketWidth sets the time span of one bucket table of a new table in
// the bucketed layout, in whole seconds. Keys are retired a bucket at a
// time, so a key is kept between the retention and the retention plus one
// width, and each new key is looked up in every live bucket (about
// retention/width + 2 of them). Default: a quarter of [WithRetention] (or
// of [WithRedeliveryHorizon]), at least one minute; 24 h without either
// (then no bucket is ever dropped, and the lookups grow by one a day: set
// a retention).
// The width is stored with the table at creation; Inbox values opened later
// use the stored one.
func WithBucketWidth(d time.Duration) Option {
	return option.Check("inbox", d >= time.Second && d%time.Second == 0, func(c *config) { c.width = d }, "bucket width %v must be whole seconds, at least 1s", d)
}

// WithKeyText keeps each key's text next to its digest in the bucketed
// layout (column idem_key), for operators who need to read keys back. It
// costs the key's length per row; without it the column is NULL (free)
// and a key can only be found by digesting it.
func WithKeyText() Option {
	return func(c *config) error { c.keyText = true; return nil }
}

// WithLookupFilterMemory bounds the memory of the Bloom filters with which
// an Inbox of the bucketed layout skips looking new keys up in buckets
// that no longer change (16 bits, 2 bytes, a key; default 256 MiB, about
// 134 million keys; 0 turns them off). Buckets beyond the budget are looked
// up directly: slower with random keys, never less exact.
func WithLookupFilterMemory(bytes int64) Option {
	return option.Check("inbox", bytes >= 0, func(c *config) { c.filterBytes = bytes }, "lookup filter memory %d is negative", bytes)
}

// WithBucketPacking turns off (false) or on (true, the default) the
// packing of sealed buckets on PostgreSQL: [Inbox.Sweep] rebuilds, once,
// the primary-key index of each bucket that no statement writes to any
// more, full (fillfactor 100) and without blocking writers or lookups
// (REINDEX CONCURRENTLY). Random keys leave a B-tree about 70% full; the
// packed index takes about a quarter less space, for one sequential
// rewrite of the index per bucket. It needs the Inbox's [Beginner] to be a
// pool (*sql.DB), which lends a connection outside any transaction; other
// engines ignore it.
func WithBucketPacking(on bool) Option {
	return func(c *config) error { c.noPack = !on; return nil }
}

// WithLogger sets a logger for retries and sweeps (default: discard).
func WithLogger(l *slog.Logger) Option {
	return option.Check("inbox", l != nil, func(c *config) { c.logger = l }, "nil logger")
}

// WithHooks installs observation hooks (metrics, tracing).
func WithHooks(h Hooks) Option {
	return option.Check("inbox", h != nil, func(c *config) { c.hooks = h }, "nil hooks")
}

// Hooks observes an Inbox without tying it to a metrics library. Methods are
// called synchronously and must be cheap and safe for concurrent use.
type Hooks interface {
	// Processed is called once per message that reached a decision:
	// applied, duplicate, or failed (err != nil), with the time spent
	// including retries.
	Processed(consumer string, applied bool, err error, d time.Duration)
	// Retried is called before a transaction is retried after err.
	Retried(consumer string, attempt int, err error)
	// Swept is called after a Sweep batch deleted n rows.
	Swept(consumer string, n int)
	// Batch is called once per ProcessBatch or ProcessBatchSet batch that
	// reached the database, with its number of valid messages and the time
	// it took, retries included (each message is also reported to
	// Processed).
	Batch(consumer string, n int, d time.Duration)
}
