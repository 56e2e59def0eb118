// Package consumetest is the test harness the broker adapters share: a
// SQLite inbox with an effects table, a consumer run in a goroutine the test
// owns, an observer that collects events, and the benchmark that compares a
// consumer with its store alone.
package consumetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// Main runs the tests of m (through testenv.Main, which starts and stops
// the servers) and then fails the binary if a goroutine outlived them,
// ignoring those that opts name.
func Main(m *testing.M, opts ...goleak.Option) {
	code := testenv.Main(m)
	if err := goleak.Find(opts...); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// Insert is the statement that records one effect: a key and its data.
const Insert = "INSERT INTO effects (key, data)"

// Effects is a SQLite inbox (consumer "orders-worker") with an effects
// table (key, data) that the handlers write to.
type Effects struct {
	DB *sql.DB
	In *inbox.Inbox
}

// NewEffects opens a fresh SQLite file (WAL) with a migrated inbox and an
// empty effects table.
func NewEffects(tb testing.TB) *Effects {
	tb.Helper()
	db := testenv.SQLite(tb)
	in := inboxtest.Migrated(tb, db, sqldialect.SQLite, "orders-worker")
	if _, err := db.ExecContext(context.Background(), "CREATE TABLE effects (key TEXT NOT NULL, data TEXT NOT NULL)"); err != nil {
		tb.Fatal(err)
	}
	return &Effects{DB: db, In: in}
}

// Traced returns another handle on e's inbox (same database and
// consumer), traced through t.
func (e *Effects) Traced(tb testing.TB, t idem.Tracer) *inbox.Inbox {
	tb.Helper()
	in, err := inbox.New(e.DB, sqldialect.SQLite, "orders-worker", inbox.WithTracer(t))
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// Apply records one effect inside tx.
func (e *Effects) Apply(ctx context.Context, tx *sql.Tx, key, data string) error {
	_, err := tx.ExecContext(ctx, Insert+" VALUES (?, ?)", key, data)
	return err
}

// Counts returns how many times each key's effect was applied.
func (e *Effects) Counts(tb testing.TB) map[string]int {
	tb.Helper()
	rows, err := e.DB.Query("SELECT key, count(*) FROM effects GROUP BY key")
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			tb.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// Runner is a consumer's Run in a goroutine the test owns.
type Runner struct {
	Cancel context.CancelFunc
	Done   chan error
}

// Start calls run in a new goroutine with a context that Cancel ends.
func Start(run func(context.Context) error) *Runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{Cancel: cancel, Done: make(chan error, 1)}
	go func() { r.Done <- run(ctx) }()
	return r
}

// Stop cancels the run and returns its error, failing tb if it does not
// return within 15 seconds.
func (r *Runner) Stop(tb testing.TB) error {
	tb.Helper()
	r.Cancel()
	select {
	case err := <-r.Done:
		return err
	case <-time.After(15 * time.Second):
		tb.Fatal("Run did not return after cancel")
		return nil
	}
}

// Events collects a consumer's settled messages; Observe is its observer.
type Events[M any] struct {
	mu  sync.Mutex
	all []idem.DeliveryEvent[M]
}

// Observe records ev.
func (e *Events[M]) Observe(ev idem.DeliveryEvent[M]) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

// Count returns how many events had outcome o.
func (e *Events[M]) Count(o idem.Outcome) int {
	n := 0
	e.Each(func(ev idem.DeliveryEvent[M]) {
		if ev.Outcome == o {
			n++
		}
	})
	return n
}

// Each calls f on every event so far, in order, holding the lock.
func (e *Events[M]) Each(f func(idem.DeliveryEvent[M])) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.all {
		f(ev)
	}
}

// Keys returns n message ids, "order-0" to "order-<n-1>".
func Keys(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("order-%d", i)
	}
	return ids
}

// Crashed runs a consumer whose connection a test hook closes right after
// its first commit and before any ack (the crash: committed, never acked),
// checks that Run then reports idem.ErrClosed, and returns how many keys
// committed (at least one).
func Crashed(tb testing.TB, e *Effects, run func(context.Context) error) int {
	tb.Helper()
	if err := run(context.Background()); !errors.Is(err, idem.ErrClosed) {
		tb.Fatalf("Run after the connection closed = %v, want ErrClosed", err)
	}
	committed := len(e.Counts(tb))
	if committed == 0 {
		tb.Fatal("nothing committed before the crash")
	}
	return committed
}

// RunUntil runs a consumer until cond holds (failing tb after d) and stops
// it, expecting Run to end with context.Canceled.
func RunUntil(tb testing.TB, run func(context.Context) error, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	r := Start(run)
	testenv.WaitFor(tb, d, what, cond)
	if err := r.Stop(tb); !errors.Is(err, context.Canceled) {
		tb.Fatalf("Run = %v, want context.Canceled", err)
	}
}

// WantOnce checks that each of keys was applied exactly once and no other
// key was, and, when seen is not nil, that each reached the set handler
// exactly once.
func WantOnce(tb testing.TB, counts, seen map[string]int, keys []string) {
	tb.Helper()
	for _, k := range keys {
		if counts[k] != 1 || (seen != nil && seen[k] != 1) {
			tb.Errorf("%s: applied %d times, given to the set handler %d times; want 1 (and 1)", k, counts[k], seen[k])
		}
	}
	if len(counts) != len(keys) {
		tb.Errorf("%d keys applied (%v), want %d", len(counts), counts, len(keys))
	}
}

// RunTraced runs a consumer of the [TracedKeys] until both keys are
// applied and the copy is a duplicate, and stops it.
func RunTraced[M any](tb testing.TB, run func(context.Context) error, ev *Events[M]) {
	tb.Helper()
	RunUntil(tb, run, 20*time.Second, "the traced messages settled", func() bool {
		return ev.Count(idem.Applied) == 2 && ev.Count(idem.Duplicate) == 1
	})
}
