package idemnats

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/retry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler applies one message inside the inbox transaction tx. Do all
// database work through tx: it commits with the message's key or not at all.
// Return an error wrapped with [idem.Permanent] when a redelivery cannot
// succeed (the message is dead-lettered at once); any other error rolls
// this message back and it is redelivered later.
type Handler func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error

// SetHandler applies several messages at once inside the inbox transaction
// tx, typically with set-based statements (one multi-row INSERT or UPDATE
// for all of them); see [WithSetHandler]. msgs holds, in delivery order,
// exactly the messages of one group whose keys this transaction recorded:
// duplicates are left out, and msgs is never empty. Do all database work
// through tx; f may run again for the same messages (a retried
// transaction), only one run's effect committing. Aggregate per target row
// before a set-based UPDATE (an UPDATE … FROM a list naming one row twice
// changes it once). Do not ack the messages or keep msgs after returning:
// the Consumer acks them after the commit.
type SetHandler func(ctx context.Context, tx *sql.Tx, msgs []jetstream.Msg) error

// ReasonNoMetadata is the dead-letter reason of a message that is not a
// JetStream delivery (it has no metadata to ack or count deliveries by).
// The other reasons are idem's, shared by every adapter ([idem.Reason]).
const ReasonNoMetadata idem.Reason = "no-jetstream-md"

// Consumer runs a pull consumer's messages through an inbox: each fetched
// batch is applied in one transaction ([inbox.Inbox.ProcessBatch]) and each
// message is acked only after that transaction committed.
type Consumer struct {
	cons jetstream.Consumer
	cfg  config
	core *consume.Inbox[jetstream.Msg]
	// proc decides a group: the inbox's Process, or a WindowConsumer's.
	proc func(context.Context, []consume.Delivery[jetstream.Msg]) ([]consume.Decision, error)

	afterCommit func() // test hook: runs between the commit and the acks
}

// NewConsumer returns a Consumer that fetches from cons (a pull consumer
// with AckExplicit, the default), applies each message with handler through
// in, and acks it after the commit. With [WithSetHandler], handler is the
// per-message fallback of the set handler and may be nil.
func NewConsumer(cons jetstream.Consumer, in *inbox.Inbox, handler Handler, opts ...Option) (*Consumer, error) {
	c := &Consumer{cons: cons, cfg: defaultConfig()}
	if cons == nil {
		return nil, c.cfg.Invalid("nil consumer")
	}
	if err := consume.Apply("idemnats", &c.cfg, opts); err != nil {
		return nil, err
	}
	var err error
	if c.core, err = consume.NewInbox(in, consume.Handler[jetstream.Msg](handler), &c.cfg.Config); err != nil {
		return nil, err
	}
	c.proc = c.core.Process
	return c, nil
}

// Run pulls and processes messages until ctx is done or the connection is
// closed. It returns ctx's error (wrapped) or, when the NATS connection is
// closed (not merely reconnecting), an error wrapping [idem.ErrClosed].
// While the connection is reconnecting, Run waits (the pull is renewed
// after the reconnect) and resumes when the server is back; no message is
// acked unless its transaction committed. The pull's goroutines are stopped
// before Run returns. Several goroutines may call Run on one Consumer to
// process batches in parallel.
//
// Messages are processed in groups: the first message that arrives, and
// every further one that arrives within the linger (see [WithLinger]), up to
// the batch size, commit in one transaction, and are then acked. Run keeps
// three groups moving at once: the next one is pulled while the current
// one's transaction runs, and the previous one's acks go out meanwhile
// (always after its own commit, group after group). The consumer's
// MaxAckPending (JetStream's default: 1000) should therefore be at least
// twice the batch size, or the pull waits for the acks.
//
// If the process dies:
//   - before the commit: nothing is recorded; the messages are redelivered
//     after the consumer's AckWait and processed.
//   - after the commit, before the ack: the redelivery finds the key;
//     it is acked as a Duplicate and the effect is not repeated.
//   - after the ack: done.
func (c *Consumer) Run(ctx context.Context) error {
	pullCtx, stopPull := context.WithCancel(ctx)
	groups, err := c.pull(pullCtx)
	if err != nil {
		stopPull()
		return fmt.Errorf("idemnats: %w", err)
	}
	defer func() {
		stopPull()
		for range groups { // wait for the puller to exit
		}
	}()
	st := startSettler()
	defer st.stop()
	failures := 0
	for {
		err := st.failed()
		if err == nil {
			select {
			case p, ok := <-groups:
				switch {
				case !ok:
					err = ctx.Err() // groups only closes once ctx is done
				case p.err != nil:
					err = p.err
				default:
					err = c.process(ctx, p.msgs, st)
				}
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		switch {
		case err == nil:
			failures = 0
			continue
		case ctx.Err() != nil:
			return fmt.Errorf("idemnats: %w", ctx.Err())
		case isClosed(err):
			return fmt.Errorf("idemnats: connection closed: %w: %w", idem.ErrClosed, err)
		case errors.As(err, new(*pullStopped)):
			return fmt.Errorf("idemnats: %w", err)
		case errors.As(err, new(*stopError)):
			return err
		}
		failures++
		d := pullBackoff.Delay(failures - 1)
		c.cfg.Logger.Warn("idemnats: pull failed; retrying", "err", err, "in", d)
		if err := retry.Sleep(ctx, d); err != nil {
			return fmt.Errorf("idemnats: %w", err)
		}
	}
}

// pulled is one group of messages, or the error that ended the pull.
type pulled struct {
	msgs []jetstream.Msg
	err  error
}

// pullStopped is the error that ended a pull for good: the server ended it
// (the consumer was deleted, say), or the connection closed.
type pullStopped struct{ err error }

func (e *pullStopped) Error() string { return "pull stopped: " + e.err.Error() }
func (e *pullStopped) Unwrap() error { return e.err }

// pull receives messages with the client's Consume, which keeps pull
// requests open on the server (renewed after a reconnect and when its
// heartbeats stop), and forms them into groups on a goroutine of its own,
// handed over one at a time, so that the next group is gathered while the
// current one's transaction runs. The client calls back with each message
// on the subscription's goroutine; a full hand-off holds it there, so that
// at most the pull's 2×BatchSize messages wait. Consume rather than the
// Messages iterator: the iterator's Next arms a heartbeat timer and, with a
// wait, a second timer each call, which cost the consumer about a tenth of
// its CPU (docs/benchmarks.md); Consume keeps one heartbeat timer, and the
// linger here is one timer reset only when the messages run dry mid-group.
// The channel closes once ctx is done or the pull has ended for good (its
// last group carries a *pullStopped).
func (c *Consumer) pull(ctx context.Context) (<-chan pulled, error) {
	msgs := make(chan jetstream.Msg, c.cfg.BatchSize)
	var last atomic.Pointer[error] // the latest error the client reported
	cc, err := c.cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done(): // never acked: redelivered after AckWait
		}
	},
		jetstream.PullMaxMessages(2*c.cfg.BatchSize),
		jetstream.PullExpiry(c.cfg.maxWait),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			last.Store(&err)
			if !isClosed(err) {
				c.cfg.Logger.Warn("idemnats: pull reported an error; the client renews it", "err", err)
			}
		}))
	if err != nil {
		return nil, err
	}
	out := make(chan pulled)
	go func() {
		defer close(out)
		defer cc.Stop()
		linger := time.NewTimer(time.Hour)
		linger.Stop()
		for {
			var p pulled
			select {
			case m := <-msgs:
				p.msgs = c.gather(ctx, append(make([]jetstream.Msg, 0, c.cfg.BatchSize), m), msgs, linger)
			case <-cc.Closed():
				p.err = &pullStopped{c.stopCause(ctx, last.Load())}
			case <-ctx.Done():
				return
			}
			select {
			case out <- p:
			case <-ctx.Done():
				return
			}
			if p.err != nil {
				return
			}
		}
	}()
	return out, nil
}

// stopCause says why a pull ended for good: the connection's closing or
// the consumer's deletion if the client reported one; else, since the
// subscription can close before the client tells its error handler, and
// the error reported last may be an old passing one (a missed heartbeat),
// what the server says of the consumer now; else that last error.
func (c *Consumer) stopCause(ctx context.Context, reported *error) error {
	if reported != nil && (isClosed(*reported) || errors.Is(*reported, jetstream.ErrConsumerDeleted)) {
		return *reported
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.cons.Info(ictx); err != nil {
		return err
	}
	if reported != nil {
		return *reported
	}
	return jetstream.ErrMsgIteratorClosed
}

// gather adds to group the messages already waiting and those that arrive
// within the linger of the one before, up to the batch size.
func (c *Consumer) gather(ctx context.Context, group []jetstream.Msg, msgs <-chan jetstream.Msg, linger *time.Timer) []jetstream.Msg {
	for len(group) < c.cfg.BatchSize {
		select {
		case m := <-msgs:
			group = append(group, m)
			continue
		default:
		}
		linger.Reset(c.cfg.linger) // dry mid-group: wait for one more
		select {
		case m := <-msgs:
			linger.Stop()
			group = append(group, m)
		case <-linger.C:
			return group
		case <-ctx.Done():
			linger.Stop()
			return group
		}
	}
	return group
}

// stopError ends Run with its error: a WindowConsumer's dedup set failed,
// and no message of the group was acked (fail closed).
type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }

func isClosed(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed)
}

// process applies one group in one transaction and hands its messages to
// st to settle. It returns an error only when Run should stop or back off
// (the connection failed): messages it could not settle are redelivered by
// the server.
func (c *Consumer) process(ctx context.Context, msgs []jetstream.Msg, st *settler) error {
	ds := make([]consume.Delivery[jetstream.Msg], 0, len(msgs))
	metas := make([]*jetstream.MsgMetadata, 0, len(msgs))
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			d := consume.Delivery[jetstream.Msg]{Msg: m, Attempt: 1}
			c.cfg.Start(ctx, &d)
			if err := c.deadLetter(ctx, &d, nil, consume.Decision{Outcome: idem.DeadLettered, Reason: ReasonNoMetadata, Err: err}); err != nil {
				c.cfg.Unsettled(&d, err)
				return err
			}
			continue
		}
		ds = append(ds, consume.Delivery[jetstream.Msg]{Msg: m, Attempt: int(meta.NumDelivered)})
		metas = append(metas, meta)
	}
	if len(ds) == 0 {
		return nil
	}
	decs, err := c.proc(ctx, ds)
	switch {
	case decs == nil:
		// Shutting down, or a WindowConsumer's dedup set failed (a
		// *stopError): leave the messages to AckWait (a nak could race
		// the closing connection and means the same).
		return err
	case err != nil:
		// Nothing committed, or the commit's outcome is unknown: every
		// message is nak'd with a delay, none acked.
		c.cfg.Logger.Warn("idemnats: batch failed; redelivering", "messages", len(ds), "err", err)
	case c.afterCommit != nil:
		c.afterCommit()
	}
	st.do(func() error {
		for i := range ds {
			if err := c.settle(ctx, &ds[i], metas[i], decs[i]); err != nil {
				for j := i; j < len(ds); j++ {
					c.cfg.Unsettled(&ds[j], err) // redelivered by the server
				}
				return err
			}
		}
		return nil
	})
	return nil
}

// settler settles committed groups on its own goroutine, one at a time, in
// the order they were handed over, so that the acks of one group overlap
// the next group's transaction. The first error of a group stops that
// group's settling (its other messages are redelivered) and is kept for
// [settler.failed].
type settler struct {
	jobs chan func() error
	errs chan error
	done chan struct{}
}

func startSettler() *settler {
	s := &settler{jobs: make(chan func() error, 1), errs: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for job := range s.jobs {
			if err := job(); err != nil {
				select {
				case s.errs <- err:
				default: // one error is enough to stop or back off
				}
			}
		}
	}()
	return s
}

// do queues job, waiting while the previous group is still being settled.
func (s *settler) do(job func() error) { s.jobs <- job }

// failed returns, once, the error of a group settled since the last call.
func (s *settler) failed() error {
	select {
	case err := <-s.errs:
		return err
	default:
		return nil
	}
}

// stop waits until every queued group is settled.
func (s *settler) stop() {
	close(s.jobs)
	<-s.done
}

// settle performs one decision: ack, nak with a delay, or dead letter.
func (c *Consumer) settle(ctx context.Context, d *consume.Delivery[jetstream.Msg], meta *jetstream.MsgMetadata, dec consume.Decision) error {
	var err error
	switch {
	case dec.Outcome == idem.DeadLettered:
		return c.deadLetter(ctx, d, meta, dec)
	case dec.Outcome == idem.Retried:
		if err := d.Msg.NakWithDelay(dec.After); err != nil {
			return fmt.Errorf("idemnats: nak %s: %w", d.Key, err)
		}
	case c.cfg.doubleAck:
		err = d.Msg.DoubleAck(ctx)
	default:
		err = d.Msg.Ack()
	}
	if err != nil {
		return fmt.Errorf("idemnats: ack %s: %w", d.Key, err)
	}
	c.cfg.Report(d, dec)
	return nil
}
