package chaos

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore"
)

// point is a step of a consumer at which a worker can be told to die
// (SIGKILL itself). Which points a strategy has depends on how many commits
// it makes.
type point uint8

// The crash points.
const (
	// pointNone: the delivery does not crash.
	pointNone point = iota
	// pointBefore: the message was received; nothing was done yet.
	pointBefore
	// pointInTx: inside the transaction that holds the effect, after the
	// effect's statements, before COMMIT.
	pointInTx
	// pointBetween: after a strategy's first commit and before its second
	// (the key before the effect, the effect before the key, the keystore's
	// effect before Complete). One-transaction strategies do not have it.
	pointBetween
	// pointAfter: everything committed, before the ack is sent.
	pointAfter
	pointCount
)

// String returns the point's name as the docs and reports use it.
func (p point) String() string {
	switch p {
	case pointNone:
		return "none"
	case pointBefore:
		return "before"
	case pointInTx:
		return "in-tx"
	case pointBetween:
		return "between"
	case pointAfter:
		return "after"
	}
	return "Point(" + strconv.Itoa(int(p)) + ")"
}

// Strategy describes one consumer design the harness can run.
type Strategy struct {
	// Name is the name used by WithStrategies and in reports. idem's own
	// strategies begin with "idem".
	Name string
	// Idem reports whether this is one of idem's strategies, which must
	// neither lose nor double anything.
	Idem bool
	// How is a one-line description of the consumer's steps.
	How string
	// fails says what the design loses or doubles, and when ("" for idem's).
	fails string
	// points are the crash points the strategy has.
	points []point
}

type handlerFunc func(ctx context.Context, w *worker, d delivery) (outcome byte, err error)

type batchFunc func(ctx context.Context, w *worker, ds []delivery) ([]byte, []error, error)

// impl is a strategy and its consumer code.
type impl struct {
	Strategy
	handle   handlerFunc
	batch    batchFunc // set for batch strategies; handle is nil then
	keystore bool      // needs a key store
	ordered  bool      // needs each producer's messages in order: route producers to workers
}

var (
	onePoints = []point{pointBefore, pointInTx, pointAfter}
	twoPoints = []point{pointBefore, pointInTx, pointBetween, pointAfter}
)

// registry lists the strategies in report order: the naive designs first,
// then idem's.
var registry = []impl{
	{Strategy: Strategy{Name: "naive", points: onePoints,
		How:   "apply the effect, no deduplication",
		fails: "doubles every redelivery and every duplicate"},
		handle: handleNaive},
	{Strategy: Strategy{Name: "check-then-act", points: onePoints,
		How:   "SELECT the key; if absent, a transaction that applies the effect and INSERTs the key ON CONFLICT DO NOTHING",
		fails: "doubles when two deliveries of a message both pass the check before either commits"},
		handle: handleCheckThenAct},
	{Strategy: Strategy{Name: "key-before-effect", points: twoPoints,
		How:   "INSERT the key and commit; if it was new, apply the effect in a second transaction (Watermill's deduplicator)",
		fails: "loses the message when the consumer dies, or the effect fails, after the key committed"},
		handle: handleKeyBeforeEffect},
	{Strategy: Strategy{Name: "effect-before-key", points: twoPoints,
		How:   "SELECT the key; if absent, apply the effect and commit, then INSERT the key and commit",
		fails: "doubles when the consumer dies between the two commits, and on concurrent duplicates"},
		handle: handleEffectBeforeKey},
	{Strategy: Strategy{Name: "naive-cte", points: onePoints,
		How:   "one transaction: INSERT the key ON CONFLICT DO NOTHING, then an unconditional UPDATE",
		fails: "doubles every redelivery: DO NOTHING does not abort the transaction, so the credit lands again"},
		handle: handleNaiveCTE},
	{Strategy: Strategy{Name: "keystore-bare", points: twoPoints,
		How:   "keystore.Do around a provider call that does not deduplicate by key",
		fails: "doubles when the consumer dies after the effect and before Complete: the lease expires and the retry runs the effect again"},
		handle: handleKeystoreBare, keystore: true},
	{Strategy: Strategy{Name: "idem-inbox", Idem: true, points: onePoints,
		How: "inbox.Process: the key and the effect commit in one transaction"},
		handle: handleInbox},
	{Strategy: Strategy{Name: "idem-inbox-batch", Idem: true, points: onePoints,
		How: "inbox.ProcessBatch over what the worker has received (up to 32 messages), one commit"},
		batch: handleInboxBatch},
	{Strategy: Strategy{Name: "idem-keystore", Idem: true, points: twoPoints,
		How: "keystore.Do: reserve → provider call carrying the key (the provider deduplicates by it) → complete"},
		handle: handleKeystore, keystore: true},
	{Strategy: Strategy{Name: "idem-sequence", Idem: true, points: onePoints,
		How: "sequence.SQLMarks.Advance in the effect's transaction; each producer's messages go to one worker; a gap is refused (nack) and redelivered later"},
		handle: handleSequence, ordered: true},
}

// Strategies returns the strategies the harness knows, in report order.
func Strategies() []Strategy {
	out := make([]Strategy, len(registry))
	for i, s := range registry {
		out[i] = s.Strategy
		out[i].points = append([]point(nil), s.points...)
	}
	return out
}

func lookup(name string) (*impl, bool) {
	for i := range registry {
		if registry[i].Name == name {
			return &registry[i], true
		}
	}
	return nil, false
}

// effect is the business change: count the application in the ledger and
// credit the account.
func (w *worker) effect(ctx context.Context, tx *sql.Tx, d delivery) error {
	if _, err := tx.ExecContext(ctx, w.q.ledgerInc, int64(d.msg)); err != nil {
		return fmt.Errorf("chaos: ledger: %w", err)
	}
	if _, err := tx.ExecContext(ctx, w.q.credit, d.amount, int64(d.account)); err != nil {
		return fmt.Errorf("chaos: credit: %w", err)
	}
	return nil
}

// inTx runs fn in a transaction, dies at pointInTx if d says so, and
// commits.
func (w *worker) inTx(ctx context.Context, d delivery, fn func(tx *sql.Tx) error) error {
	return withTx(ctx, w.db, "effect", func(tx *sql.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		w.at(d, pointInTx)
		return nil
	})
}

// withTx runs fn in a transaction of db and commits it; what names the
// step in errors.
func withTx(ctx context.Context, db *sql.DB, what string, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("chaos: %s: begin: %w", what, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("chaos: %s: commit: %w", what, err)
	}
	return nil
}

// keyExists reports whether the naive key table has d's key.
func (w *worker) keyExists(ctx context.Context, d delivery) (bool, error) {
	var one int
	err := w.db.QueryRowContext(ctx, w.q.keySelect, int64(d.msg)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("chaos: check key: %w", err)
	}
	return true, nil
}

func handleNaive(ctx context.Context, w *worker, d delivery) (byte, error) {
	err := w.inTx(ctx, d, func(tx *sql.Tx) error { return w.effect(ctx, tx, d) })
	return outcomeApplied, err
}

func handleCheckThenAct(ctx context.Context, w *worker, d delivery) (byte, error) {
	seen, err := w.keyExists(ctx, d)
	if err != nil || seen {
		return outcomeDuplicate, err
	}
	err = w.inTx(ctx, d, func(tx *sql.Tx) error {
		if err := w.effect(ctx, tx, d); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, w.q.keyInsert, int64(d.msg))
		return err
	})
	return outcomeApplied, err
}

func handleKeyBeforeEffect(ctx context.Context, w *worker, d delivery) (byte, error) {
	res, err := w.db.ExecContext(ctx, w.q.keyInsert, int64(d.msg))
	if err != nil {
		return 0, fmt.Errorf("chaos: record key: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return outcomeDuplicate, err
	}
	w.at(d, pointBetween)
	err = w.inTx(ctx, d, func(tx *sql.Tx) error { return w.effect(ctx, tx, d) })
	return outcomeApplied, err
}

func handleEffectBeforeKey(ctx context.Context, w *worker, d delivery) (byte, error) {
	seen, err := w.keyExists(ctx, d)
	if err != nil || seen {
		return outcomeDuplicate, err
	}
	if err := w.inTx(ctx, d, func(tx *sql.Tx) error { return w.effect(ctx, tx, d) }); err != nil {
		return 0, err
	}
	w.at(d, pointBetween)
	if _, err := w.db.ExecContext(ctx, w.q.keyInsert, int64(d.msg)); err != nil {
		return 0, fmt.Errorf("chaos: record key: %w", err)
	}
	return outcomeApplied, nil
}

func handleNaiveCTE(ctx context.Context, w *worker, d delivery) (byte, error) {
	err := w.inTx(ctx, d, func(tx *sql.Tx) error {
		// The bug: the insert's affected-row count is ignored.
		if _, err := tx.ExecContext(ctx, w.q.keyInsert, int64(d.msg)); err != nil {
			return err
		}
		return w.effect(ctx, tx, d)
	})
	return outcomeApplied, err
}

func handleInbox(ctx context.Context, w *worker, d delivery) (byte, error) {
	applied, err := w.in.Process(ctx, strconv.FormatUint(d.msg, 10), func(ctx context.Context, tx *sql.Tx) error {
		if err := w.effect(ctx, tx, d); err != nil {
			return err
		}
		w.at(d, pointInTx)
		return nil
	})
	if !applied {
		return outcomeDuplicate, err
	}
	return outcomeApplied, err
}

func handleInboxBatch(ctx context.Context, w *worker, ds []delivery) ([]byte, []error, error) {
	// Apply the batch in account order, so that concurrent batches lock
	// account rows in the same order and do not deadlock (PostgreSQL would
	// detect it, but only after deadlock_timeout).
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ds[a].account, ds[b].account) })
	msgs := make([]inbox.Message, len(ds))
	for i, j := range order {
		msgs[i] = inbox.Message{Key: strconv.FormatUint(ds[j].msg, 10), Value: ds[j]}
	}
	res, err := w.in.ProcessBatch(ctx, msgs, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		d := m.Value.(delivery)
		if err := w.effect(ctx, tx, d); err != nil {
			return err
		}
		w.at(d, pointInTx) // the whole batch's transaction dies with it
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	outcomes, errs := make([]byte, len(ds)), make([]error, len(ds))
	for i, r := range res {
		j := order[i]
		outcomes[j], errs[j] = outcomeDuplicate, r.Err
		if r.Applied {
			outcomes[j] = outcomeApplied
		}
	}
	return outcomes, errs, nil
}

// keystoreDo runs the provider call under keystore.Do with the run's lease.
func (w *worker) keystoreDo(ctx context.Context, d delivery, call func(context.Context, *sql.Tx) error) (byte, error) {
	// Scoped by run and strategy: a shared key store (Redis) must not
	// replay one strategy's results to another.
	key := w.cfg.RunID + "/" + w.cfg.Strategy + "/" + strconv.FormatUint(d.msg, 10)
	_, replayed, err := keystore.Do(ctx, w.ks, key, nil, func(ctx context.Context) ([]byte, error) {
		if err := w.inTx(ctx, d, func(tx *sql.Tx) error { return call(ctx, tx) }); err != nil {
			return nil, err
		}
		w.at(d, pointBetween) // the effect happened; Complete has not
		return nil, nil
	}, keystore.WithLease(time.Duration(w.cfg.Lease)), keystore.WithTTL(time.Hour))
	if replayed {
		return outcomeDuplicate, err
	}
	return outcomeApplied, err
}

// handleKeystore passes the key downstream: the provider records it with
// its own unique constraint and applies the effect only for a new key.
func handleKeystore(ctx context.Context, w *worker, d delivery) (byte, error) {
	return w.keystoreDo(ctx, d, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, w.q.providerInsert, int64(d.msg))
		if err != nil {
			return fmt.Errorf("chaos: provider: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("chaos: provider: %w", err)
		} else if n == 0 { // a repeat call: absorbed, counted
			_, err := tx.ExecContext(ctx, w.q.providerRepeat, int64(d.msg))
			return err
		}
		return w.effect(ctx, tx, d)
	})
}

// handleKeystoreBare calls a provider that does not deduplicate.
func handleKeystoreBare(ctx context.Context, w *worker, d delivery) (byte, error) {
	return w.keystoreDo(ctx, d, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, w.q.providerUpsert, int64(d.msg)); err != nil {
			return fmt.Errorf("chaos: provider: %w", err)
		}
		return w.effect(ctx, tx, d)
	})
}

func handleSequence(ctx context.Context, w *worker, d delivery) (byte, error) {
	applied := false
	err := w.inTx(ctx, d, func(tx *sql.Tx) error {
		var err error
		applied, err = w.marks.Advance(ctx, tx, producerID(d.producer), 0, 0, int32(d.seq))
		if err != nil || !applied {
			return err
		}
		return w.effect(ctx, tx, d)
	})
	if !applied {
		return outcomeDuplicate, err
	}
	return outcomeApplied, err
}
