// Package settest records what a broker adapter's set handler received, for
// the adapters' tests: how many calls, and how often each message key was in
// one (whether that call's transaction then committed or rolled back).
package settest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
)

// Recorder counts the messages of type M that its handlers receive.
type Recorder[M any] struct {
	// Fail, when set before the handler runs, is called with each batch
	// after it is counted; an error it returns is the handler's.
	Fail func(msgs []M) error

	key   func(M) string
	mu    sync.Mutex
	seen  map[string]int
	calls int
}

// New returns a recorder that counts messages by key(m).
func New[M any](key func(M) string) *Recorder[M] {
	return &Recorder[M]{key: key, seen: map[string]int{}}
}

// Handler returns a set handler that counts its batch, calls Fail, then
// writes one row per message with [Insert]. An empty batch is an error: the
// adapters never call a set handler without messages.
func (r *Recorder[M]) Handler(insert string, row func(M) []any) func(context.Context, *sql.Tx, []M) error {
	return func(ctx context.Context, tx *sql.Tx, msgs []M) error {
		r.mu.Lock()
		r.calls++
		for _, m := range msgs {
			r.seen[r.key(m)]++
		}
		fail := r.Fail
		r.mu.Unlock()
		if len(msgs) == 0 {
			return errors.New("set handler called with no messages")
		}
		if fail != nil {
			if err := fail(msgs); err != nil {
				return err
			}
		}
		return Insert(ctx, tx, insert, msgs, row)
	}
}

// Insert writes one row per message, row(m), with multi-row inserts of at
// most 500 rows: insert is "INSERT INTO table (columns)", and the values use
// ? placeholders.
func Insert[M any](ctx context.Context, tx *sql.Tx, insert string, msgs []M, row func(M) []any) error {
	for lo := 0; lo < len(msgs); lo += 500 {
		chunk := msgs[lo:min(lo+500, len(msgs))]
		var args []any
		tuples := make([]string, len(chunk))
		for i, m := range chunk {
			vals := row(m)
			tuples[i] = "(?" + strings.Repeat(", ?", len(vals)-1) + ")"
			args = append(args, vals...)
		}
		if _, err := tx.ExecContext(ctx, insert+" VALUES "+strings.Join(tuples, ", "), args...); err != nil {
			return err
		}
	}
	return nil
}

// Snapshot returns how often each key reached a handler, and the number of
// calls.
func (r *Recorder[M]) Snapshot() (map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.seen))
	for k, v := range r.seen {
		m[k] = v
	}
	return m, r.calls
}
