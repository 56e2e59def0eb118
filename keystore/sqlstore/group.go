package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/idem-go/idem/keystore"
)

// maxGroup bounds the operations that share one transaction.
const maxGroup = 64

// group commits the operations of concurrent callers together (SQLite
// only). SQLite has one writer at a time, and each write transaction pays
// for its locks and for WAL frames of pages that every operation touches
// (the token counter, the right edge of the expiry index); with a group,
// the callers that queued while one transaction ran share the next one.
//
// There is no background goroutine: the first caller to find no
// transaction running leads. It takes the queue (its own operation
// included), runs it in one transaction, and on its way out hands the lead
// to the first caller still queued. Every caller returns only after the
// transaction holding its operation has committed (or failed), so each
// operation still takes effect between its call and its return.
type group struct {
	mu      sync.Mutex
	queue   []*groupOp
	leading bool
}

type groupOp struct {
	ctx  context.Context
	fn   func(context.Context, runner) error
	err  error
	done chan bool // receives true: lead the next batch; false: err is final

	// panicked is what fn panicked with: a panic must neither leave the
	// group without a leader (every later call would wait forever) nor
	// surface in another caller's goroutine, so it is recovered where it
	// happens and raised again in the caller of its own operation.
	panicked any
}

// call runs o.fn, turning a panic into an error for the batch.
func (o *groupOp) call(ctx context.Context, x runner) (err error) {
	defer func() {
		if p := recover(); p != nil {
			o.panicked = p
			err = fmt.Errorf("panic in a key store operation: %v", p)
		}
	}()
	return o.fn(ctx, x)
}

// do runs fn, alone or in a transaction shared with other callers' fns.
// fn must set all its outputs on every run: if a shared transaction fails
// in any of its operations, it is rolled back and each operation runs again
// on its own.
//
// ctx is looked at only before fn starts: an operation whose ctx has ended
// by then is not run and returns ctx.Err(). Once started, fn runs under
// keystore.Detach(ctx), so that the caller's cancellation cannot cut a
// statement (or a COMMIT) whose write may already have landed and turn
// its true answer into context.Canceled.
func (s *Store) do(ctx context.Context, fn func(context.Context, runner) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g := s.grp
	if g == nil {
		dctx, cancel := keystore.Detach(ctx)
		defer cancel()
		if s.wait.Standbys > 0 {
			return s.doWaited(dctx, fn) // waitreplicas.go
		}
		return fn(dctx, runner{s: s})
	}
	op := &groupOp{ctx: ctx, fn: fn, done: make(chan bool, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, op)
	if g.leading {
		g.mu.Unlock()
		if lead := <-op.done; !lead {
			if op.panicked != nil {
				panic(op.panicked)
			}
			return op.err
		}
		g.mu.Lock()
	}
	g.leading = true
	n := min(len(g.queue), maxGroup)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	s.runGroup(batch)
	for _, o := range batch {
		if o != op {
			o.done <- false
		}
	}

	g.mu.Lock()
	if len(g.queue) > 0 {
		next := g.queue[0] // stays queued: it takes its batch itself
		g.mu.Unlock()
		next.done <- true
	} else {
		g.leading = false
		g.mu.Unlock()
	}
	if op.panicked != nil {
		panic(op.panicked)
	}
	return op.err
}

// runGroup runs the operations of batch and sets their errors.
func (s *Store) runGroup(batch []*groupOp) {
	live := batch[:0:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.err = err // never started
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	// Each operation on its own, on the pool, as without a group. Started
	// operations run detached from their callers' cancellation (see do).
	alone := func() {
		for _, o := range live {
			dctx, cancel := keystore.Detach(o.ctx)
			o.err = o.call(dctx, runner{s: s})
			cancel()
		}
	}
	// One caller's cancellation must not interrupt the statements of the
	// others, nor its own once started: the shared transaction runs
	// detached, bounded by keystore.CallTimeout.
	tctx, cancel := keystore.Detach(live[0].ctx)
	defer cancel()
	// Prepare on the pool before the transaction takes a connection: with
	// a pool of one (as idem serve opens SQLite), preparing inside it would
	// wait for the connection the transaction holds.
	if len(live) <= 1 || s.prepAll(tctx) != nil {
		alone()
		return
	}
	tx, err := s.db.BeginTx(tctx, nil)
	if err != nil {
		for _, o := range live {
			o.err = err // retryable (busy) or not, the caller's retry decides
		}
		return
	}
	for _, o := range live {
		if err := o.call(tctx, runner{s: s, tx: tx}); err != nil {
			// Whatever failed may have aborted the transaction: roll it
			// back and give every operation its own.
			_ = tx.Rollback()
			alone()
			return
		}
	}
	err = tx.Commit()
	for _, o := range live {
		o.err = err
	}
}

// runner runs the store's prepared statements on the pool or, in a group,
// inside the shared transaction.
type runner struct {
	s  *Store
	tx *sql.Tx
}

// prepAll prepares the statements that grouped operations run.
func (s *Store) prepAll(ctx context.Context) error {
	l, err := s.current(ctx)
	if err != nil {
		return err
	}
	for _, q := range []string{l.q.reserve, l.q.lookup, l.q.complete, l.q.tokenOf, l.q.release} {
		if _, err := s.prep(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (r runner) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if r.tx == nil {
		return r.s.prep(ctx, query)
	}
	if st, ok := r.s.cached(query); ok {
		return r.tx.StmtContext(ctx, st), nil
	}
	// Not prepared on the pool yet: prepare it for this transaction only,
	// on the connection the transaction holds.
	return r.tx.PrepareContext(ctx, query)
}

// exec runs a prepared statement and returns the number of rows it
// affected.
func (r runner) exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs a prepared statement that returns at most one row and
// scans it into dest; no row is sql.ErrNoRows.
func (r runner) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx, args...).Scan(dest...)
}
