package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/sqldialect"
)

// Publisher sends messages to a broker. Publish returns nil only when the
// broker has accepted every message (acks, confirms, PubAcks). On an error
// none of the batch is marked sent, and all of it is published again later,
// with the same IDs. Messages of one key are in order within the batch;
// publish them in that order.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) error
}

// PublisherFunc adapts a function to [Publisher].
type PublisherFunc func(ctx context.Context, msgs []Message) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, msgs []Message) error { return f(ctx, msgs) }

// Relay publishes committed outbox messages. Run several for throughput and
// availability (PostgreSQL); they never publish one key's messages out of
// order.
type Relay struct {
	db *sql.DB
	o  *Outbox
	p  Publisher
	relayConfig
}

// relayConfig is what a Relay's options set.
type relayConfig struct {
	batch  int
	poll   time.Duration
	wake   <-chan struct{}
	logger *slog.Logger
	wait   sqldialect.ReplicaWait // WithWaitReplicas; Standbys 0: none
}

// RelayOption configures [NewRelay]. Options are checked once, by
// NewRelay; a bad one makes it return an error wrapping
// idem.ErrInvalidOption.
type RelayOption func(*relayConfig) error

// WithBatch sets how many messages one round claims (default 100).
func WithBatch(n int) RelayOption {
	return func(r *relayConfig) error {
		if n <= 0 || n > 10_000 {
			return fmt.Errorf("outbox: batch %d must be 1 to 10000: %w", n, idem.ErrInvalidOption)
		}
		r.batch = n
		return nil
	}
}

// WithPoll sets how long Run waits between empty rounds (default 200 ms).
func WithPoll(d time.Duration) RelayOption {
	return func(r *relayConfig) error {
		if d <= 0 {
			return fmt.Errorf("outbox: poll %v must be positive: %w", d, idem.ErrInvalidOption)
		}
		r.poll = d
		return nil
	}
}

// WithWakeup makes Run start a round as soon as c receives, instead of
// waiting for the poll interval: feed it from LISTEN on [Outbox.Channel]
// (see package outbox/pgnotify) or from the writer itself.
func WithWakeup(c <-chan struct{}) RelayOption {
	return func(r *relayConfig) error { r.wake = c; return nil }
}

// WithWaitReplicas makes each round wait, before it publishes, until n
// streaming standbys have every commit the round's messages come from, for
// at most timeout (PostgreSQL only; [sqldialect.ReplicaWait] says how).
// Without it, under asynchronous replication, the relay can publish a
// message whose transaction a failover then loses: downstream acts on an
// order that no longer exists (issue 29 measured 84 such phantoms in one
// failover with 1 s of lag). A round whose wait fails publishes nothing
// and returns an error wrapping [sqldialect.ErrNotReplicated]; Run retries
// it after the poll interval. Synchronous replication makes it
// unnecessary.
func WithWaitReplicas(n int, timeout time.Duration) RelayOption {
	return func(r *relayConfig) error {
		w := sqldialect.ReplicaWait{Standbys: n, Timeout: timeout}
		if err := w.Validate(); err != nil {
			return fmt.Errorf("outbox: %w: %w", err, idem.ErrInvalidOption)
		}
		r.wait = w
		return nil
	}
}

// WithLogger sets a logger (default: discard).
func WithLogger(l *slog.Logger) RelayOption {
	return func(r *relayConfig) error {
		if l == nil {
			return fmt.Errorf("outbox: nil logger: %w", idem.ErrInvalidOption)
		}
		r.logger = l
		return nil
	}
}

// NewRelay returns a relay that publishes o's messages from db through p.
func NewRelay(db *sql.DB, o *Outbox, p Publisher, opts ...RelayOption) (*Relay, error) {
	if db == nil || o == nil || p == nil {
		return nil, fmt.Errorf("outbox: NewRelay needs a database, an outbox and a publisher: %w", idem.ErrInvalidOption)
	}
	r := &Relay{db: db, o: o, p: p, relayConfig: relayConfig{batch: 100, poll: 200 * time.Millisecond, logger: slog.New(slog.DiscardHandler)}}
	if err := option.Apply("outbox", &r.relayConfig, opts); err != nil {
		return nil, err
	}
	if r.wait.Standbys > 0 && o.d != sqldialect.Postgres {
		return nil, fmt.Errorf("outbox: WithWaitReplicas: %v has no standbys to wait for (PostgreSQL only): %w", o.d, idem.ErrInvalidOption)
	}
	return r, nil
}

// Run publishes rounds until ctx ends, and returns ctx's error. A failed
// round is logged and retried after the poll interval. The caller owns the
// goroutine Run runs in.
func (r *Relay) Run(ctx context.Context) error {
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.logger.WarnContext(ctx, "outbox: relay round failed; retrying", "err", err)
		}
		if err == nil && n == r.batch {
			continue // more are waiting
		}
		t := time.NewTimer(r.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-r.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// RunOnce claims up to a batch of unsent messages, publishes them and marks
// them sent, in one transaction, and returns how many it published. If the
// process dies after Publish and before the commit, the messages stay unsent
// and are published again, with the same IDs.
//
// On SQLite, whose one writer excludes every other, RunOnce first looks for
// an unsent message outside a transaction, and begins one only if there is
// one: an idle relay does not take the write lock from the application's
// writers at every poll.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	if q := r.o.q.unsent; q != "" {
		var one int
		switch err := r.db.QueryRowContext(ctx, q).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return 0, nil
		case err != nil:
			return 0, fmt.Errorf("outbox: relay: look for unsent messages: %w", err)
		}
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("outbox: relay: begin: %w", err)
	}
	defer tx.Rollback()
	msgs, err := r.claim(ctx, tx)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	if r.wait.Standbys > 0 {
		// The claim saw committed messages only, whose commits were
		// flushed before they became visible: the flush position read
		// after it is past them.
		mark, err := sqldialect.MarkCommit(ctx, tx)
		if err != nil {
			return 0, fmt.Errorf("outbox: relay: %w", err)
		}
		if err := r.wait.Wait(ctx, r.db, mark); err != nil {
			return 0, fmt.Errorf("outbox: relay: nothing published: %w", err)
		}
	}
	if err := r.p.Publish(ctx, msgs); err != nil {
		return 0, fmt.Errorf("outbox: relay: publish: %w", err)
	}
	seqs := make([]int64, len(msgs))
	for i, m := range msgs {
		seqs[i] = m.Seq
	}
	var arg any = seqs
	if r.o.d == sqldialect.SQLite {
		b, _ := json.Marshal(seqs)
		arg = string(b)
	}
	if _, err := tx.ExecContext(ctx, r.o.q.mark, arg); err != nil {
		return 0, fmt.Errorf("outbox: relay: mark sent: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("outbox: relay: commit (the batch will be published again): %w", err)
	}
	return len(msgs), nil
}

// claim reads a batch of unsent messages and, on PostgreSQL, keeps for each
// key only the run of messages that no other relay's claim precedes.
func (r *Relay) claim(ctx context.Context, tx *sql.Tx) ([]Message, error) {
	rows, err := tx.QueryContext(ctx, r.o.q.claim, r.batch)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: claim: %w", err)
	}
	var msgs []Message
	for rows.Next() {
		var m Message
		var hdr []byte
		if err := rows.Scan(&m.Seq, &m.ID, &m.Topic, &m.OrderingKey, &m.Payload, &hdr); err != nil {
			rows.Close()
			return nil, fmt.Errorf("outbox: relay: claim: %w", err)
		}
		if len(hdr) > 0 {
			if err := json.Unmarshal(hdr, &m.Headers); err != nil {
				rows.Close()
				return nil, fmt.Errorf("outbox: relay: message %s: headers: %w", m.ID, err)
			}
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: relay: claim: %w", err)
	}
	if r.o.d != sqldialect.Postgres || len(msgs) == 0 {
		return msgs, nil
	}
	return r.inOrder(ctx, tx, msgs)
}

// inOrder drops, for each key, the claimed messages that follow an unsent
// message of the same key which this relay did not claim (another relay
// holds it): publishing them now would overtake it.
func (r *Relay) inOrder(ctx context.Context, tx *sql.Tx, msgs []Message) ([]Message, error) {
	mine := make(map[int64]bool, len(msgs))
	keys := make([]string, 0, len(msgs))
	seen := map[string]bool{}
	var maxSeq int64
	for _, m := range msgs {
		mine[m.Seq] = true
		maxSeq = max(maxSeq, m.Seq)
		if m.OrderingKey != "" && !seen[m.OrderingKey] {
			seen[m.OrderingKey] = true
			keys = append(keys, m.OrderingKey)
		}
	}
	if len(keys) == 0 {
		return msgs, nil
	}
	rows, err := tx.QueryContext(ctx, r.o.q.heads, keys, maxSeq)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: order check: %w", err)
	}
	defer rows.Close()
	blocked := map[string]bool{} // key → an earlier message is held elsewhere
	allowed := map[int64]bool{}
	for rows.Next() {
		var key string
		var seq int64
		if err := rows.Scan(&key, &seq); err != nil {
			return nil, fmt.Errorf("outbox: relay: order check: %w", err)
		}
		if blocked[key] {
			continue
		}
		if !mine[seq] {
			blocked[key] = true
			continue
		}
		allowed[seq] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: relay: order check: %w", err)
	}
	kept := msgs[:0]
	var skipped []string
	for _, m := range msgs {
		if m.OrderingKey == "" || allowed[m.Seq] {
			kept = append(kept, m)
		} else {
			skipped = append(skipped, strconv.FormatInt(m.Seq, 10))
		}
	}
	if len(skipped) > 0 {
		r.logger.DebugContext(ctx, "outbox: relay: left messages behind an earlier one held by another relay", "seqs", strings.Join(skipped, ","))
	}
	return kept, nil
}
