package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/idem-go/idem"
)

// Backends for [WithBackend].
const (
	// BackendSQLite runs each strategy on its own SQLite file, shared by
	// the strategy's worker processes.
	BackendSQLite = "sqlite"
	// backendPostgres runs each strategy in its own schema of a PostgreSQL
	// database, created for the run and dropped after it.
	backendPostgres = "postgres"
)

// Defaults of [Run].
const (
	DefaultMessages   = 10000
	DefaultDupRate    = 0.10
	DefaultCrashRate  = 0.01
	DefaultAckLoss    = 0.02
	DefaultReorder    = 0.10
	DefaultConsumers  = 4
	DefaultPartitions = 64
	// DefaultVisibility is how long a delivery may stay unacknowledged
	// before the broker redelivers it.
	DefaultVisibility = time.Second
	// DefaultLease is the keystore strategies' lease. A crash between
	// Reserve and Complete holds the key this long.
	DefaultLease = time.Second
)

// Option configures [Run]. Options are validated once, when Run starts;
// a bad one makes Run return an error wrapping idem.ErrInvalidOption.
type Option func(*config) error

type config struct {
	messages                             int
	dupRate, crashRate, ackLoss, reorder float64
	backend, dsn, keystore               string
	strategies                           []string
	consumers, partitions                int
	seed                                 uint64
	visibility, lease                    time.Duration
	command                              func(ctx context.Context) *exec.Cmd
	progress                             func(Progress)
	logger                               *slog.Logger
	keep                                 bool
	startTimeout                         time.Duration
}

func defaultConfig() config {
	return config{
		messages: DefaultMessages, dupRate: DefaultDupRate, crashRate: DefaultCrashRate,
		ackLoss: DefaultAckLoss, reorder: DefaultReorder, backend: BackendSQLite,
		consumers: DefaultConsumers, partitions: DefaultPartitions, seed: 1,
		visibility: DefaultVisibility, lease: DefaultLease, command: defaultCommand,
		logger: slog.New(slog.DiscardHandler), startTimeout: time.Minute,
	}
}

// defaultCommand runs this program's "chaos-worker" subcommand.
func defaultCommand(ctx context.Context) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.CommandContext(ctx, exe, "chaos-worker")
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("chaos: "+format+": %w", append(args, idem.ErrInvalidOption)...)
}

// between stores v in *dst after checking that it is in [lo, hi]; want
// says so in the error.
func between[T int | time.Duration](name string, dst *T, v, lo, hi T, want string) error {
	if v < lo || v > hi {
		return invalid("%s %v: want %s", name, v, want)
	}
	*dst = v
	return nil
}

// given stores v in *dst unless isNil.
func given[T any](name string, dst *T, v T, isNil bool) error {
	if isNil {
		return invalid("nil %s", name)
	}
	*dst = v
	return nil
}

// setRate stores a probability after checking that it is in [0, most].
func setRate(name string, dst *float64, v, most float64) error {
	if !(v >= 0 && v <= most) { // also rejects NaN
		return invalid("%s %v: want 0 to %v", name, v, most)
	}
	*dst = v
	return nil
}

// WithMessages sets how many distinct messages each strategy must apply
// (default [DefaultMessages]).
func WithMessages(n int) Option {
	return func(c *config) error { return between("messages", &c.messages, n, 1, 1<<30, "1 to 2^30") }
}

// WithDupRate sets the share of messages the producer publishes twice
// (default [DefaultDupRate]): half of the copies right behind the original,
// so that two consumers process them at once, half later.
func WithDupRate(p float64) Option {
	return func(c *config) error { return setRate("dup rate", &c.dupRate, p, 1) }
}

// WithCrashRate sets the probability that a delivery's consumer dies
// (default [DefaultCrashRate]): three quarters are told to SIGKILL
// themselves at one of the strategy's crash points, a quarter are killed by
// the harness a random 0–4 ms after the delivery was sent.
func WithCrashRate(p float64) Option {
	return func(c *config) error { return setRate("crash rate", &c.crashRate, p, 0.5) }
}

// WithAckLossRate sets the probability that a delivery's ack is dropped
// (default [DefaultAckLoss]); the broker redelivers the message after the
// visibility timeout.
func WithAckLossRate(p float64) Option {
	return func(c *config) error { return setRate("ack loss rate", &c.ackLoss, p, 0.5) }
}

// WithReorder sets the share of messages the producer publishes late, up
// to 100 positions behind their place (default [DefaultReorder]).
func WithReorder(p float64) Option {
	return func(c *config) error { return setRate("reorder", &c.reorder, p, 1) }
}

// WithBackend sets the database: [BackendSQLite] with dsn a directory for
// the database files ("" for a temporary directory, removed afterwards), or
// backendPostgres with dsn a postgres:// URL of a user that may create
// schemas. Default: SQLite in a temporary directory.
func WithBackend(backend, dsn string) Option {
	return func(c *config) error {
		switch backend {
		case BackendSQLite:
		case backendPostgres:
			if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
				return invalid("postgres backend needs a postgres:// URL, got %q", redact(dsn))
			}
		default:
			return invalid("backend %q: want %s or %s", backend, BackendSQLite, backendPostgres)
		}
		c.backend, c.dsn = backend, dsn
		return nil
	}
}

// WithKeystore puts the keystore strategies' key store at url (redis://…,
// or any URL the workers' opener (WithKeystoreOpener) accepts) instead of in the
// ledger's database. "memory" is rejected: the workers are separate
// processes.
func WithKeystore(url string) Option {
	return func(c *config) error {
		if url == "memory" || strings.HasPrefix(url, "memory:") {
			return invalid("keystore %q: an in-memory store is not shared between worker processes", url)
		}
		c.keystore = url
		return nil
	}
}

// WithStrategies selects the strategies to run, by name (see
// [Strategies]); default: all of them, in report order.
func WithStrategies(names ...string) Option {
	return func(c *config) error {
		if len(names) == 0 {
			return invalid("no strategies")
		}
		seen := map[string]bool{}
		for _, n := range names {
			if _, ok := lookup(n); !ok {
				return invalid("unknown strategy %q (known: %s)", n, strings.Join(strategyNames(), ", "))
			}
			if seen[n] {
				return invalid("strategy %q given twice", n)
			}
			seen[n] = true
		}
		c.strategies = append([]string(nil), names...)
		return nil
	}
}

func strategyNames() []string {
	var out []string
	for _, s := range registry {
		out = append(out, s.Name)
	}
	return out
}

// WithConsumers sets the number of worker processes per strategy (default
// [DefaultConsumers]).
func WithConsumers(n int) Option {
	return func(c *config) error { return between("consumers", &c.consumers, n, 1, 64, "1 to 64") }
}

// WithPartitions sets the number of producers whose sequences the
// idem-sequence strategy tracks (default [DefaultPartitions]).
func WithPartitions(n int) Option {
	return func(c *config) error { return between("partitions", &c.partitions, n, 1, 1<<16, "1 to 65536") }
}

// WithSeed sets the seed of the fault schedule (default 1). The same seed
// gives every message the same faults: duplicates, publication order, and
// for each attempt the crash point and whether its ack is lost. Process
// timing is not reproducible.
func WithSeed(seed uint64) Option {
	return func(c *config) error { c.seed = seed; return nil }
}

// WithVisibilityTimeout sets how long the broker waits for an ack before
// redelivering (default [DefaultVisibility]).
func WithVisibilityTimeout(d time.Duration) Option {
	return func(c *config) error {
		return between("visibility timeout", &c.visibility, d, 10*time.Millisecond, math.MaxInt64, "at least 10ms")
	}
}

// WithLease sets the keystore strategies' lease (default [DefaultLease]).
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		return between("lease", &c.lease, d, 10*time.Millisecond, math.MaxInt64, "at least 10ms")
	}
}

// withWorkerCommand sets how a worker process is started: cmd must run
// [ServeWorker] on its stdin and stdout. The harness sets the command's
// stdin, stdout, stderr and SysProcAttr. Default: this executable with the
// argument "chaos-worker".
func withWorkerCommand(cmd func(ctx context.Context) *exec.Cmd) Option {
	return func(c *config) error { return given("worker command", &c.command, cmd, cmd == nil) }
}

// WithProgress calls f about ten times a second while a strategy runs, from
// Run's goroutine; f must return quickly.
func WithProgress(f func(Progress)) Option {
	return func(c *config) error { return given("progress function", &c.progress, f, f == nil) }
}

// WithLogger logs worker restarts and worker errors (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return given("logger", &c.logger, l, l == nil) }
}

// WithKeep keeps the databases after the run (SQLite files, PostgreSQL
// schemas) for inspection; their location is in the report.
func WithKeep(keep bool) Option {
	return func(c *config) error { c.keep = keep; return nil }
}

// Progress is a snapshot of a running strategy, for progress bars.
type Progress struct {
	Strategy   string        // name of the running strategy
	Index      int           // its index, from 0
	Strategies int           // how many run
	Done       int           // copies acknowledged
	Total      int           // copies to acknowledge (messages and duplicates)
	Delivered  int64         // deliveries so far
	Crashes    int64         // worker processes killed so far
	Elapsed    time.Duration // since the strategy's first delivery
}
