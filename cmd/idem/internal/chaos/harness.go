package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/sqldialect"
)

// harness runs the strategies of one Run.
type harness struct {
	cfg    config
	sched  schedule
	msgs   []message
	order  []entry
	dups   int64
	expect []int64 // balance per account if every message applies once
	runID  string
	dir    string  // SQLite: the directory of the database files
	pg     *sql.DB // PostgreSQL: the harness's pool
}

// namespace is where one strategy's tables live.
type namespace struct {
	q      queries
	dsn    string // for the workers: SQLite file or PostgreSQL URL
	schema string
	where  string // for the report
}

// Run runs every selected strategy against the same fault schedule, one
// after the other, each with its own fresh tables and its own worker
// processes, and returns what the ledger says about each. An idem strategy
// that lost or doubled anything is in the report (see
// [Report.Failures]), not an error: Run's error means the harness itself
// could not do its job (bad options, a database it cannot reach, workers
// that do not start, ctx ending). With an error, the report holds the
// strategies that ran, if any.
//
// Run starts one goroutine per worker process, and reaps every process and
// ends every goroutine before it returns.
func Run(ctx context.Context, opts ...Option) (*Report, error) {
	cfg := defaultConfig()
	if err := option.Apply("chaos", &cfg, opts); err != nil {
		return nil, err
	}
	if len(cfg.strategies) == 0 {
		cfg.strategies = strategyNames()
	}
	h := &harness{cfg: cfg, sched: schedule{
		seed: cfg.seed, dupRate: cfg.dupRate, crashRate: cfg.crashRate, ackLoss: cfg.ackLoss, reord: cfg.reorder,
	}}
	var id [4]byte
	_, _ = rand.Read(id[:])
	h.runID = hex.EncodeToString(id[:])
	h.msgs = h.sched.messages(cfg.messages, cfg.partitions)
	h.order = h.sched.publishOrder(cfg.messages)
	h.dups = int64(len(h.order) - cfg.messages)
	h.expect = make([]int64, accounts)
	for _, m := range h.msgs {
		h.expect[m.account] += m.amount
	}
	rep := &Report{
		Seed: cfg.seed, Backend: cfg.backend, Keystore: redact(cfg.keystore), Messages: cfg.messages,
		Consumers: cfg.consumers, DupRate: cfg.dupRate, CrashRate: cfg.crashRate, AckLossRate: cfg.ackLoss, Reorder: cfg.reorder,
	}
	cleanup, err := h.openBackend(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	for i, name := range cfg.strategies {
		s, _ := lookup(name)
		res, err := h.runStrategy(ctx, i, s)
		rep.Strategies = append(rep.Strategies, res)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// openBackend prepares the SQLite directory or the PostgreSQL pool.
func (h *harness) openBackend(ctx context.Context) (cleanup func(), err error) {
	switch h.cfg.backend {
	case backendPostgres:
		db, err := sql.Open(driverPostgres, h.cfg.dsn)
		if err != nil {
			return nil, fmt.Errorf("chaos: postgres: %w (is github.com/jackc/pgx/v5/stdlib linked?)", err)
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("chaos: postgres %s: %w", redact(h.cfg.dsn), err)
		}
		h.pg = db
		return func() { db.Close() }, nil
	default:
		if h.cfg.dsn != "" {
			h.dir = h.cfg.dsn
			if err := os.MkdirAll(h.dir, 0o755); err != nil {
				return nil, fmt.Errorf("chaos: %w", err)
			}
			return func() {}, nil
		}
		dir, err := os.MkdirTemp("", "idem-chaos-")
		if err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
		h.dir = dir
		return func() {
			if !h.cfg.keep {
				os.RemoveAll(dir)
			}
		}, nil
	}
}

// openNamespace creates strategy idx's fresh namespace and returns the
// harness's handle on it.
func (h *harness) openNamespace(ctx context.Context, idx int, s *impl) (ns namespace, db *sql.DB, closeFn func(), err error) {
	if h.cfg.backend == backendPostgres {
		ns.schema = fmt.Sprintf("idem_chaos_%s_%02d", h.runID, idx)
		ns.q, ns.dsn, ns.where = newQueries(sqldialect.Postgres, ns.schema), h.cfg.dsn, "schema "+ns.schema
		if _, err := h.pg.ExecContext(ctx, "CREATE SCHEMA "+ns.schema); err != nil {
			return ns, nil, nil, fmt.Errorf("chaos: create schema: %w", err)
		}
		return ns, h.pg, func() {
			if !h.cfg.keep {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				_, _ = h.pg.ExecContext(cctx, "DROP SCHEMA "+ns.schema+" CASCADE")
			}
		}, nil
	}
	path := filepath.Join(h.dir, fmt.Sprintf("%02d-%s.db", idx, s.Name))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return ns, nil, nil, fmt.Errorf("chaos: %w", err)
		}
	}
	ns.q, ns.dsn, ns.where = newQueries(sqldialect.SQLite, ""), path, path
	db, err = sql.Open(driverSQLite, sqldialect.SQLiteDSN(path))
	if err != nil {
		return ns, nil, nil, fmt.Errorf("chaos: sqlite: %w (is modernc.org/sqlite linked?)", err)
	}
	db.SetMaxOpenConns(1)
	return ns, db, func() { db.Close() }, nil
}

// runStrategy runs one strategy to the end and checks its ledger.
func (h *harness) runStrategy(ctx context.Context, idx int, s *impl) (strategyResult, error) {
	res := strategyResult{Name: s.Name, Idem: s.Idem, Messages: h.cfg.messages, Duplicates: h.dups}
	ns, db, closeNS, err := h.openNamespace(ctx, idx, s)
	if err != nil {
		res.Error = err.Error()
		return res, err
	}
	defer closeNS()
	res.Database = ns.where
	if err := ns.q.setup(ctx, db, h.cfg.partitions, s.keystore && h.cfg.keystore == ""); err != nil {
		res.Error = err.Error()
		return res, fmt.Errorf("chaos: %s: %w", s.Name, err)
	}
	slots := 1
	if s.ordered {
		slots = h.cfg.consumers
	}
	b := newBroker(h.msgs, h.order, h.sched, s.points, h.cfg.visibility, slots)
	l := &runLoop{h: h, ctx: ctx, idx: idx, s: s, ns: ns, b: b, res: &res}
	loopErr := l.run()
	c := b.c
	res.Delivered, res.Redelivered, res.Nacks, res.AcksLost = c.delivered, c.redelivered, c.nacks, c.acksLost
	res.DieOrders, res.Kills, res.Crashes, res.WorkerErrors, res.DuplicatesSkipped = c.dieOrders, c.kills, c.crashes, c.workerErrors, c.dupSkips
	res.Unfinished = b.pending
	if res.Seconds > 0 {
		res.PerSecond = float64(h.cfg.messages) / res.Seconds
	}

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	t, err := ns.q.check(cctx, db, h.cfg.messages)
	if err == nil {
		res.Applied, res.Doubled, res.Extra = t.applied, t.doubled, t.extra
		res.Lost = int64(h.cfg.messages) - (t.rows - t.outOfRange)
		res.Corrupt = t.outOfRange
		for a, want := range h.expect {
			res.BalanceDrift += t.balance[a] - want
			if t.balance[a] != want {
				res.AccountsWrong++
			}
		}
		if s.keystore {
			res.DownstreamRepeats = t.absorbed
		}
	}
	if err = errors.Join(loopErr, err); err != nil {
		res.Error = err.Error()
		return res, fmt.Errorf("chaos: %s: %w", s.Name, err)
	}
	return res, nil
}

// redact hides the password of a URL.
func redact(s string) string {
	for i := 0; i+3 <= len(s); i++ {
		if s[i:i+3] == "://" {
			rest := s[i+3:]
			for j := 0; j < len(rest) && rest[j] != '/'; j++ {
				if rest[j] == '@' {
					return s[:i+3] + "…@" + rest[j+1:]
				}
			}
			break
		}
	}
	return s
}
