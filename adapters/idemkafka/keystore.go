package idemkafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// processKeystore runs one partition's records through keystore.Do, in
// order. It returns nil only when every record is applied, replayed, or
// dead-lettered.
func (c *Consumer) processKeystore(ctx context.Context, recs []*kgo.Record) error {
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
		if err := c.applyKeystore(ctx, r, key); err != nil {
			return err
		}
	}
	return nil
}

func (c *Consumer) applyKeystore(ctx context.Context, r *kgo.Record, key string) error {
	var fp []byte
	if c.cfg.fingerprint != nil {
		fp = c.cfg.fingerprint(r)
	}
	attempts, waits := 0, 0
	for {
		attempts++
		_, replayed, err := keystore.Do(ctx, c.ks, key, fp, func(ctx context.Context) ([]byte, error) {
			if err := c.kh(ctx, r); err != nil {
				return nil, &handlerError{err}
			}
			return nil, nil
		}, c.doOpts...)
		var he *handlerError
		switch {
		case err == nil && replayed:
			c.outcome(r, Duplicate, nil)
			return nil
		case err == nil:
			c.outcome(r, Applied, nil)
			return nil
		case errors.Is(err, keystore.ErrInProgress):
			// Another holder (a previous owner of the partition) runs it;
			// its lease bounds the wait. Not a handler failure.
			attempts--
			waits++
			if werr := c.sleep(ctx, min(waits, 8)); werr != nil {
				return werr
			}
			continue
		case errors.Is(err, idem.ErrFingerprintMismatch):
			return c.deadLetter(ctx, r, ReasonFingerprintMismatch, attempts, err)
		case !errors.As(err, &he):
			return fmt.Errorf("idemkafka: %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err) // store down: fail closed
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		switch {
		case idem.IsPermanent(err):
			return c.deadLetter(ctx, r, ReasonPermanent, attempts, he.err)
		case attempts > c.cfg.retries:
			return c.deadLetter(ctx, r, ReasonHandler, attempts, he.err)
		}
		c.cfg.log.Info("idemkafka: handler failed, retrying", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "attempt", attempts, "err", err)
		if werr := c.sleep(ctx, attempts); werr != nil {
			return werr
		}
	}
}
