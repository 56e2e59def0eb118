package idemkafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/retry"
)

// delivery is one record on its way through the delivery core.
type delivery = consume.Delivery[*kgo.Record]

// deliveries wraps one partition's records, each at its first run.
func deliveries(recs []*kgo.Record) []delivery {
	ds := make([]delivery, len(recs))
	for i, r := range recs {
		ds[i] = delivery{Msg: r, Attempt: 1}
	}
	return ds
}

// ran reports whether the handler ran before dec: not when the record had no
// usable key or fingerprint.
func ran(dec consume.Decision) bool {
	switch dec.Reason {
	case idem.ReasonMissingKey, idem.ReasonInvalidKey, idem.ReasonInvalidFingerprint:
		return false
	}
	return true
}

// runs is the HeaderDLQAttempts of d's dead letter: its handler runs.
func runs(d *delivery, dec consume.Decision) int {
	if !ran(dec) {
		return 0
	}
	return d.Attempt
}

// unsettled ends the spans left open on ds when the consumer stops with
// *err: their records are consumed again.
func (c *config) unsettled(ds []delivery, err *error) {
	if *err == nil {
		return
	}
	for i := range ds {
		c.Unsettled(&ds[i], *err)
	}
}

// rerun reports dec, a Retried decision, and waits its delay before d's next
// run, whose attempt it counts.
func (c *config) rerun(ctx context.Context, d *delivery, dec consume.Decision) error {
	c.Report(d, dec)
	if err := retry.Sleep(ctx, dec.After); err != nil {
		return err
	}
	d.Attempt++
	return nil
}

// process applies one partition's polled records through the inbox, in one
// transaction, then retries the records that failed alone and dead-letters
// those that cannot be applied. It returns nil only when every record is
// applied, a duplicate, or dead-lettered, so that the caller may mark the
// last offset.
func (c *Consumer) process(ctx context.Context, recs []*kgo.Record) (_ bool, err error) {
	ds := deliveries(recs)
	defer c.g.cfg.unsettled(ds, &err)
	decs, err := c.batch(ctx, ds)
	if err != nil {
		return false, err // nothing committed (or unknown): fail closed
	}
	for i := range ds {
		d, dec := &ds[i], decs[i]
		for dec.Outcome == idem.Retried {
			if err := c.g.cfg.rerun(ctx, d, dec); err != nil {
				return false, err
			}
			if dec, err = c.core.ProcessOne(ctx, d); err != nil {
				return false, fmt.Errorf("idemkafka: %s: %w", where(d.Msg), err)
			}
		}
		if err := c.g.settle(ctx, d, dec); err != nil {
			return false, err
		}
	}
	return true, nil
}

// batch runs ds through the inbox in one transaction. A set handler without
// a per-record fallback that fails is retried on the whole batch with
// backoff; an error means nothing of the batch is known to have committed.
func (c *Consumer) batch(ctx context.Context, ds []delivery) ([]consume.Decision, error) {
	for attempt := 1; ; attempt++ {
		decs, err := c.core.Process(ctx, ds)
		var he *inbox.HandlerError
		switch {
		case err == nil:
			return decs, nil
		case c.h != nil || !errors.As(err, &he):
			return nil, fmt.Errorf("idemkafka: %w", err)
		case idem.IsPermanent(err) || attempt >= c.g.cfg.MaxAttempts:
			return nil, fmt.Errorf("idemkafka: %s and %d more: set handler failed after %d attempts and there is no per-record handler to isolate the record: %w",
				where(ds[0].Msg), len(ds)-1, attempt, err)
		}
		for i := range ds {
			c.g.cfg.Unsettled(&ds[i], err) // run again, under new spans
		}
		c.g.cfg.Logger.Info("idemkafka: set handler failed, retrying the batch", "records", where(ds[0].Msg), "count", len(ds), "attempt", attempt, "err", err)
		if err := c.g.cfg.Backoff.Wait(ctx, attempt-1); err != nil {
			return nil, err
		}
	}
}
