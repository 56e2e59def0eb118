package idemkafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
)

// Headers of a dead-lettered record. The original key, value and headers are
// kept; these are added.
const (
	HeaderDLQError     = "idem-dlq-error"     // the last error's text
	HeaderDLQReason    = "idem-dlq-reason"    // handler, permanent, missing-key, fingerprint-mismatch
	HeaderDLQTopic     = "idem-dlq-topic"     // original topic
	HeaderDLQPartition = "idem-dlq-partition" // original partition (decimal)
	HeaderDLQOffset    = "idem-dlq-offset"    // original offset (decimal)
	HeaderDLQAttempts  = "idem-dlq-attempts"  // handler runs made (decimal; 0 for missing-key)
	HeaderDLQGroup     = "idem-dlq-group"     // consumer group
)

// Reasons in HeaderDLQReason.
const (
	ReasonHandler             = "handler"
	ReasonPermanent           = "permanent"
	ReasonMissingKey          = "missing-key"
	ReasonFingerprintMismatch = "fingerprint-mismatch"
)

// processInbox applies one partition's polled records through the inbox. It
// returns nil only when every record is applied, a duplicate, or
// dead-lettered, so that the caller may mark the last offset.
func (c *Consumer) processInbox(ctx context.Context, recs []*kgo.Record) error {
	msgs := make([]inbox.Message, 0, len(recs))
	for _, r := range recs {
		key, err := c.cfg.key(r)
		if err == nil {
			err = idem.ValidateKey(key)
		}
		if err != nil {
			if c.cfg.missing == StopOnMissing {
				return fmt.Errorf("idemkafka: %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			if err := c.deadLetter(ctx, r, ReasonMissingKey, 0, err); err != nil {
				return err
			}
			continue
		}
		m := inbox.Message{Key: key, Value: r}
		if c.cfg.fingerprint != nil {
			m.Fingerprint = c.cfg.fingerprint(r)
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil
	}
	results, err := c.applyBatch(ctx, msgs)
	if err != nil {
		return err // nothing committed (or unknown): fail closed
	}
	for i, res := range results {
		r := msgs[i].Value.(*kgo.Record)
		switch {
		case res.Err == nil && res.Applied:
			c.outcome(r, Applied, nil)
		case res.Err == nil:
			c.outcome(r, Duplicate, nil)
		default:
			if err := c.retryInbox(ctx, msgs[i], res.Err); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyBatch runs one partition's keyed records through the inbox in one
// transaction: per record with the Handler, or with the set handler (the
// Handler as its per-record fallback). A set handler without a fallback that
// fails is retried on the whole batch with backoff; an error means nothing
// of the batch is known to have committed.
func (c *Consumer) applyBatch(ctx context.Context, msgs []inbox.Message) ([]inbox.Result, error) {
	if c.cfg.set == nil {
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
	for attempts := 1; ; attempts++ {
		results, err := c.in.ProcessBatchSet(ctx, msgs, c.setHandler, each)
		if err == nil {
			return results, nil
		}
		var he *inbox.HandlerError
		if each != nil || !errors.As(err, &he) {
			return nil, fmt.Errorf("idemkafka: %w", err)
		}
		first, last := msgs[0].Value.(*kgo.Record), msgs[len(msgs)-1].Value.(*kgo.Record)
		where := fmt.Sprintf("%s/%d@%d..%d", first.Topic, first.Partition, first.Offset, last.Offset)
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if idem.IsPermanent(err) || attempts > c.cfg.retries {
			return nil, fmt.Errorf("idemkafka: %s: set handler failed after %d attempts and there is no per-record handler to isolate the record: %w", where, attempts, err)
		}
		c.cfg.log.Info("idemkafka: set handler failed, retrying the batch", "records", where, "attempt", attempts, "err", err)
		if werr := c.sleep(ctx, attempts); werr != nil {
			return nil, werr
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
	return c.cfg.set(ctx, tx, recs)
}

// retryInbox runs a record that failed in its batch again, alone, with
// backoff, and dead-letters it when its retries are spent.
func (c *Consumer) retryInbox(ctx context.Context, m inbox.Message, err error) error {
	r := m.Value.(*kgo.Record)
	attempts := 1
	for {
		if errors.Is(err, idem.ErrFingerprintMismatch) {
			return c.deadLetter(ctx, r, ReasonFingerprintMismatch, attempts, err)
		}
		var he *inbox.HandlerError
		if !errors.As(err, &he) {
			return fmt.Errorf("idemkafka: %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if idem.IsPermanent(err) {
			return c.deadLetter(ctx, r, ReasonPermanent, attempts, err)
		}
		if attempts > c.cfg.retries {
			return c.deadLetter(ctx, r, ReasonHandler, attempts, err)
		}
		c.cfg.log.Info("idemkafka: handler failed, retrying", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "attempt", attempts, "err", err)
		if werr := c.sleep(ctx, attempts); werr != nil {
			return werr
		}
		attempts++
		var applied bool
		applied, err = c.in.ProcessMessage(ctx, m, func(ctx context.Context, tx *sql.Tx) error {
			return c.h(ctx, tx, r)
		})
		if err == nil {
			if applied {
				c.outcome(r, Applied, nil)
			} else {
				c.outcome(r, Duplicate, nil)
			}
			return nil
		}
	}
}

// sleep waits a jittered exponential backoff (half fixed, half random)
// before retry number attempt.
func (c *Consumer) sleep(ctx context.Context, attempt int) error { return c.cfg.sleep(ctx, attempt) }

func (c *config) sleep(ctx context.Context, attempt int) error {
	d := c.retryMin << min(attempt-1, 30)
	if d <= 0 || d > c.retryMax {
		d = c.retryMax
	}
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// deadLetter produces r to the dead-letter topic and waits for the broker's
// acknowledgement. If that fails (or there is no such topic), the error is
// returned and the caller must not mark r: it is never acknowledged unless
// it has been applied or dead-lettered.
func (c *Consumer) deadLetter(ctx context.Context, r *kgo.Record, reason string, attempts int, cause error) error {
	where := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
	if c.cfg.dlq == "" {
		return fmt.Errorf("idemkafka: %s (%s): no dead-letter topic: %w: %w", where, reason, ErrDeadLetter, cause)
	}
	out := deadLetterRecord(c.cfg.dlq, c.group, r, reason, attempts, cause)
	if err := c.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
		return fmt.Errorf("idemkafka: %s (%s): produce to %q: %w: %w", where, reason, c.cfg.dlq, ErrDeadLetter, err)
	}
	c.cfg.log.Warn("idemkafka: record dead-lettered", "record", where, "reason", reason, "attempts", attempts, "err", cause)
	c.outcome(r, DeadLettered, cause)
	return nil
}

// deadLetterRecord is the copy of r that goes to the dead-letter topic dlq:
// r's key, value, headers and timestamp, and the HeaderDLQ* headers.
func deadLetterRecord(dlq, group string, r *kgo.Record, reason string, attempts int, cause error) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
	headers = append(headers, r.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(cause.Error())},
		kgo.RecordHeader{Key: HeaderDLQReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDLQAttempts, Value: []byte(strconv.Itoa(attempts))},
		kgo.RecordHeader{Key: HeaderDLQGroup, Value: []byte(group)},
	)
	return &kgo.Record{Topic: dlq, Key: r.Key, Value: r.Value, Headers: headers, Timestamp: r.Timestamp}
}
