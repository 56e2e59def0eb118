package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sequence"
	"github.com/idem-go/idem/sqldialect"
)

// workerConfig is the hello frame's payload: everything a worker needs to
// know about its run.
type workerConfig struct {
	Strategy string `json:"strategy"`
	Backend  string `json:"backend"`  // "sqlite" or "postgres"
	DSN      string `json:"dsn"`      // SQLite file path or PostgreSQL URL
	Schema   string `json:"schema"`   // PostgreSQL schema of the namespace
	Keystore string `json:"keystore"` // "" (the namespace's own tables) or a URL for the opener
	RunID    string `json:"run"`      // prefixes keystore keys
	Lease    int64  `json:"lease"`    // keystore lease, nanoseconds
	Worker   int    `json:"worker"`   // the worker's slot, for logs
}

// keystoreOpener opens the key store at url for a worker; close releases
// it. Programs pass one to [ServeWorker] (see [WithKeystoreOpener]) when
// runs may use a key store outside the ledger's database, such as Redis.
type keystoreOpener func(ctx context.Context, url string) (s keystore.Store, close func() error, err error)

// workerOption configures [ServeWorker].
type workerOption func(*workerOptions) error

type workerOptions struct {
	openKeystore keystoreOpener
	crash        func()
}

// WithKeystoreOpener lets workers open a key store given by URL (the
// harness's [WithKeystore]). Without it, only the ledger database's own
// key store tables are available.
func WithKeystoreOpener(open keystoreOpener) workerOption {
	return func(o *workerOptions) error {
		if open == nil {
			return fmt.Errorf("chaos: %w: nil keystore opener", idem.ErrInvalidOption)
		}
		o.openKeystore = open
		return nil
	}
}

// crashSelf kills the calling process with SIGKILL: no deferred function
// runs, no buffer is flushed, no connection is closed politely, exactly as
// when the machine loses the process.
func crashSelf() {
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		_ = p.Kill()
	}
	select {} // wait for the signal
}

// worker is one consumer process's state.
type worker struct {
	cfg     workerConfig
	strat   *impl
	db      *sql.DB
	q       queries
	in      *inbox.Inbox
	marks   *sequence.SQLMarks
	ks      keystore.Store
	closers []func() error
	crash   func()
}

// at kills the worker if d is to die at point p.
func (w *worker) at(d delivery, p point) {
	if d.die == p && p != pointNone {
		w.crash()
	}
}

// maxBatch bounds the batch of the batch strategy.
const maxBatch = 32

// ServeWorker runs a chaos consumer on r (frames from the harness, usually
// stdin) and w (frames to it, usually stdout) until r ends. Programs that
// run the harness with the default worker command call it from a hidden
// "chaos-worker" subcommand; see withWorkerCommand. The worker must be
// able to open the run's database: link the drivers ("sqlite" from
// modernc.org/sqlite, "pgx" from github.com/jackc/pgx/v5/stdlib).
//
// Nothing but frames may be written to w; log to stderr.
func ServeWorker(ctx context.Context, r io.Reader, w io.Writer, opts ...workerOption) error {
	o := workerOptions{crash: crashSelf}
	if err := option.Apply("chaos", &o, opts); err != nil {
		return err
	}
	br, bw := bufio.NewReaderSize(r, 64<<10), bufio.NewWriter(w)
	f, err := readFrame(br)
	if err != nil {
		return fmt.Errorf("chaos: worker: read hello: %w", err)
	}
	if f.kind != kindHello {
		return fmt.Errorf("chaos: worker: %w: first frame %q is not hello", errProtocol, f.kind)
	}
	var cfg workerConfig
	if err := json.Unmarshal(f.payload, &cfg); err != nil {
		return fmt.Errorf("chaos: worker: %w: hello: %w", errProtocol, err)
	}
	wk, err := openWorker(ctx, cfg, o)
	if err != nil {
		_ = writeFrame(bw, frame{kind: kindFatal, payload: []byte(err.Error())})
		_ = bw.Flush()
		return err
	}
	defer wk.close()
	if err := writeFrame(bw, frame{kind: kindReady}); err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	batch := make([]delivery, 0, maxBatch)
	for {
		f, err := readFrame(br)
		if errors.Is(err, io.EOF) {
			return nil // the harness is done with us
		}
		if err != nil {
			return fmt.Errorf("chaos: worker: %w", err)
		}
		if f.kind != kindDeliver {
			return fmt.Errorf("chaos: worker: %w: unexpected frame %q", errProtocol, f.kind)
		}
		batch = append(batch[:0], f.d)
		// The batch strategy takes whatever else has already arrived.
		for wk.strat.batch != nil && len(batch) < maxBatch && br.Buffered() >= 5+deliverSize {
			f, err := readFrame(br)
			if err != nil || f.kind != kindDeliver {
				return fmt.Errorf("chaos: worker: %w: bad frame in batch: %v", errProtocol, err)
			}
			batch = append(batch, f.d)
		}
		if err := wk.process(ctx, batch, bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("chaos: worker: %w", err)
		}
	}
}

// openWorker opens the namespace's database and the strategy's components.
func openWorker(ctx context.Context, cfg workerConfig, o workerOptions) (*worker, error) {
	strat, ok := lookup(cfg.Strategy)
	if !ok {
		return nil, fmt.Errorf("chaos: worker: unknown strategy %q", cfg.Strategy)
	}
	wk := &worker{cfg: cfg, strat: strat, crash: o.crash}
	var err error
	switch cfg.Backend {
	case BackendSQLite:
		wk.q = newQueries(sqldialect.SQLite, "")
		wk.db, err = sql.Open(driverSQLite, sqldialect.SQLiteDSN(cfg.DSN))
	case backendPostgres:
		wk.q = newQueries(sqldialect.Postgres, cfg.Schema)
		wk.db, err = sql.Open(driverPostgres, cfg.DSN)
	default:
		return nil, fmt.Errorf("chaos: worker: unknown backend %q", cfg.Backend)
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: worker: open %s: %w", cfg.Backend, err)
	}
	wk.closers = append(wk.closers, wk.db.Close)
	wk.db.SetMaxOpenConns(4)
	if err := wk.db.PingContext(ctx); err != nil {
		wk.close()
		return nil, fmt.Errorf("chaos: worker: connect to %s: %w", cfg.Backend, err)
	}
	if wk.in, err = wk.q.newInbox(wk.db); err == nil {
		wk.marks, err = wk.q.newMarks()
	}
	if err == nil && strat.keystore {
		err = wk.openKeystore(ctx, o)
	}
	if err != nil {
		wk.close()
		return nil, fmt.Errorf("chaos: worker: %w", err)
	}
	return wk, nil
}

func (w *worker) openKeystore(ctx context.Context, o workerOptions) error {
	if w.cfg.Keystore == "" {
		s, err := w.q.newSQLKeystore(w.db)
		if err != nil {
			return err
		}
		w.ks = s
		w.closers = append(w.closers, s.Close)
		return nil
	}
	if o.openKeystore == nil {
		return fmt.Errorf("key store %q: this program cannot open key stores by URL (no WithKeystoreOpener)", redact(w.cfg.Keystore))
	}
	s, closeFn, err := o.openKeystore(ctx, w.cfg.Keystore)
	if err != nil {
		return fmt.Errorf("open key store %q: %w", redact(w.cfg.Keystore), err)
	}
	w.ks = s
	if closeFn != nil {
		w.closers = append(w.closers, closeFn)
	}
	return nil
}

func (w *worker) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		_ = w.closers[i]()
	}
}

// process handles one delivery, or one batch for the batch strategy, and
// writes an ack or nack for each.
func (w *worker) process(ctx context.Context, ds []delivery, bw *bufio.Writer) error {
	for _, d := range ds {
		w.at(d, pointBefore)
	}
	outcomes, errs := make([]byte, len(ds)), make([]error, len(ds))
	if w.strat.batch != nil {
		var err error
		outcomes, errs, err = w.strat.batch(ctx, w, ds)
		if err != nil {
			outcomes, errs = make([]byte, len(ds)), make([]error, len(ds))
			for i := range errs {
				errs[i] = err
			}
		}
	} else {
		outcomes[0], errs[0] = w.strat.handle(ctx, w, ds[0])
	}
	for i, d := range ds {
		if errs[i] == nil {
			w.at(d, pointAfter)
		}
	}
	for i, d := range ds {
		f := frame{kind: kindAck, tag: d.tag, code: outcomes[i]}
		if errs[i] != nil {
			f = frame{kind: kindNack, tag: d.tag, code: nackReason(errs[i]), payload: []byte(errs[i].Error())}
		}
		if err := writeFrame(bw, f); err != nil {
			return fmt.Errorf("chaos: worker: %w", err)
		}
	}
	return nil
}

// nackReason classifies a failed attempt for the harness's backoff.
func nackReason(err error) byte {
	switch {
	case errors.Is(err, keystore.ErrInProgress):
		return nackInProgress
	case errors.Is(err, sequence.ErrOutOfOrder):
		return nackGap
	}
	return nackError
}
