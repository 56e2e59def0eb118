package idemkafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
)

// keyOf derives r's key and fingerprint. ok is false when r has none usable
// and was dead-lettered instead; err when it could not be, or the policy is
// StopOnMissing.
func (g *group) keyOf(ctx context.Context, r *kgo.Record) (key string, fp []byte, ok bool, err error) {
	key, err = g.cfg.key(r)
	if err == nil {
		err = idem.ValidateKey(key)
	}
	if err != nil {
		if g.cfg.missing == StopOnMissing {
			return "", nil, false, fmt.Errorf("idemkafka: %s: %w", where(r), err)
		}
		return "", nil, false, g.deadLetter(ctx, r, "", ReasonMissingKey, 0, err)
	}
	if g.cfg.fingerprint != nil {
		fp = g.cfg.fingerprint(r)
		if err := idem.ValidateFingerprint(fp); err != nil {
			return "", nil, false, g.deadLetter(ctx, r, key, ReasonInvalidFingerprint, 0, fmt.Errorf("idemkafka: %s: %w", where(r), err))
		}
	}
	return key, fp, true, nil
}

// failed decides what follows a handler error of r's attempts-th run: a
// dead-letter reason, or "" after waiting the backoff for the next run. An
// error (ctx ended) stops the consumer.
func (c *config) failed(ctx context.Context, r *kgo.Record, attempts int, err error) (reason string, stop error) {
	if cerr := ctx.Err(); cerr != nil {
		return "", cerr
	}
	switch {
	case idem.IsPermanent(err):
		return ReasonPermanent, nil
	case attempts >= c.maxAttempts:
		return ReasonMaxAttempts, nil
	}
	c.log.Info("idemkafka: handler failed, retrying", "record", where(r), "attempt", attempts, "err", err)
	return "", c.backoff.Wait(ctx, attempts-1)
}

// process applies one partition's polled records through the inbox. It
// returns nil only when every record is applied, a duplicate, or
// dead-lettered, so that the caller may mark the last offset.
func (c *Consumer) process(ctx context.Context, recs []*kgo.Record) (bool, error) {
	msgs := make([]inbox.Message, 0, len(recs))
	for _, r := range recs {
		key, fp, ok, err := c.g.keyOf(ctx, r)
		if err != nil {
			return false, err
		}
		if ok {
			msgs = append(msgs, inbox.Message{Key: key, Fingerprint: fp, Value: r})
		}
	}
	if len(msgs) == 0 {
		return true, nil
	}
	results, err := c.applyBatch(ctx, msgs)
	if err != nil {
		return false, err // nothing committed (or unknown): fail closed
	}
	for i, res := range results {
		switch {
		case res.Err == nil && res.Applied:
			c.g.observe(Event{Record: msgs[i].Value.(*kgo.Record), Key: msgs[i].Key, Outcome: Applied, Attempts: 1})
		case res.Err == nil:
			c.g.observe(Event{Record: msgs[i].Value.(*kgo.Record), Key: msgs[i].Key, Outcome: Duplicate})
		default:
			if err := c.retry(ctx, msgs[i], res.Err); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// applyBatch runs one partition's keyed records through the inbox in one
// transaction: per record with the Handler, or with the set handler (the
// Handler as its per-record fallback). A set handler without a fallback that
// fails is retried on the whole batch with backoff; an error means nothing
// of the batch is known to have committed.
func (c *Consumer) applyBatch(ctx context.Context, msgs []inbox.Message) ([]inbox.Result, error) {
	if c.g.cfg.set == nil {
		results, err := c.in.ProcessBatch(ctx, msgs, c.batchHandler)
		if err != nil {
			return nil, fmt.Errorf("idemkafka: %w", err)
		}
		return results, nil
	}
	var each inbox.BatchHandler
	if c.h != nil {
		each = c.batchHandler
	}
	first := msgs[0].Value.(*kgo.Record)
	for attempts := 1; ; attempts++ {
		results, err := c.in.ProcessBatchSet(ctx, msgs, c.setHandler, each)
		if err == nil {
			return results, nil
		}
		var he *inbox.HandlerError
		if each != nil || !errors.As(err, &he) {
			return nil, fmt.Errorf("idemkafka: %w", err)
		}
		reason, stop := c.g.cfg.failed(ctx, first, attempts, err)
		switch {
		case stop != nil:
			return nil, stop
		case reason != "":
			return nil, fmt.Errorf("idemkafka: %s and %d more: set handler failed after %d attempts and there is no per-record handler to isolate the record: %w", where(first), len(msgs)-1, attempts, err)
		}
	}
}

func (c *Consumer) batchHandler(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
	return c.h(ctx, tx, m.Value.(*kgo.Record))
}

func (c *Consumer) setHandler(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
	recs := make([]*kgo.Record, len(fresh))
	for i, m := range fresh {
		recs[i] = m.Value.(*kgo.Record)
	}
	return c.g.cfg.set(ctx, tx, recs)
}

// retry runs a record that failed in its batch again, alone, with backoff,
// and dead-letters it when its attempts are spent.
func (c *Consumer) retry(ctx context.Context, m inbox.Message, err error) error {
	r := m.Value.(*kgo.Record)
	for attempts := 1; ; attempts++ {
		if errors.Is(err, idem.ErrFingerprintMismatch) {
			return c.g.deadLetter(ctx, r, m.Key, ReasonFingerprintMismatch, attempts, err)
		}
		var he *inbox.HandlerError
		if !errors.As(err, &he) {
			return fmt.Errorf("idemkafka: %s: %w", where(r), err)
		}
		reason, stop := c.g.cfg.failed(ctx, r, attempts, err)
		switch {
		case stop != nil:
			return stop
		case reason != "":
			return c.g.deadLetter(ctx, r, m.Key, reason, attempts, err)
		}
		var applied bool
		applied, err = c.in.ProcessMessage(ctx, m, func(ctx context.Context, tx *sql.Tx) error {
			return c.h(ctx, tx, r)
		})
		if err == nil {
			o := Duplicate
			if applied {
				o = Applied
			}
			c.g.observe(Event{Record: r, Key: m.Key, Outcome: o, Attempts: attempts + 1})
			return nil
		}
	}
}
