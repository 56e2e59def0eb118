package idemkafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/keystore"
)

// KeystoreHandler applies one record's effect outside any database
// transaction (an email, a call to a payment API).
type KeystoreHandler func(ctx context.Context, r *kgo.Record) error

// KeystoreConsumer is a consume loop for effects that cannot share a
// transaction with the key: each record runs through keystore.Do before its
// offset is marked.
type KeystoreConsumer struct {
	g *group
	s keystore.Store
	h KeystoreHandler
}

// NewKeystoreConsumer builds a KeystoreConsumer: each record runs through
// keystore.Do (reserve the key in progress, run h, complete the key; release
// it when h fails), one record at a time, before its offset is marked.
// WithKeystoreOptions passes the lease, TTL and wait to keystore.Do; the
// lease must exceed h's worst case. Scope s by group (keystore.Scope). kopts
// are as for NewConsumer. Every option applies except WithSetHandler and
// WithOffsetsTable.
//
// If the process dies after h's effect and before the key is completed, the
// key stays in progress until its lease expires and the re-consumed record
// then runs h again: pass the key downstream (keystore.ClaimFrom gives the
// fencing token too) so that the repeat is absorbed there. A record whose key
// is held in progress by another member is retried until that lease ends.
func NewKeystoreConsumer(s keystore.Store, h KeystoreHandler, kopts []kgo.Opt, opts ...Option) (*KeystoreConsumer, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	if h == nil {
		return nil, invalid("nil handler")
	}
	g, err := newGroup(opts, optKey|optFingerprint|optMissingKey|optKeystore, "NewKeystoreConsumer")
	if err != nil {
		return nil, err
	}
	c := &KeystoreConsumer{g: g, s: s, h: h}
	if err := g.start(kopts, c.process); err != nil {
		return nil, err
	}
	return c, nil
}

// Client returns the franz-go client the KeystoreConsumer owns, for
// producing and admin requests. Do not poll, commit or close it.
func (c *KeystoreConsumer) Client() *kgo.Client { return c.g.cl }

// Run polls, processes and marks records until ctx ends (returning ctx's
// error), Close is called (an error wrapping idem.ErrClosed), or a record
// can neither be applied nor dead-lettered (an error; its offset is not
// committed). Run may be called once. What happens if the process dies:
//   - before keystore.Do reserved the key: nothing is recorded; the record
//     is consumed again.
//   - while h runs, or after its effect and before the key is completed:
//     the re-consumed record waits for the lease to end and runs h again.
//   - after the key is completed, before the offset commit: the record is
//     consumed again and replayed (Outcome Duplicate); h does not run.
//   - after the offset commit: the record is not consumed again.
func (c *KeystoreConsumer) Run(ctx context.Context) error { return c.g.run(ctx) }

// Close stops Run (waiting for it to return), commits the marked offsets
// while leaving the group, and closes the client.
func (c *KeystoreConsumer) Close() { c.g.close() }

// process runs one partition's records through keystore.Do, in order. It
// returns nil only when every record is applied, replayed, or
// dead-lettered.
func (c *KeystoreConsumer) process(ctx context.Context, recs []*kgo.Record) (_ bool, err error) {
	ds := deliveries(recs)
	ctx, batch := c.g.cfg.StartBatch(ctx, len(ds))
	defer func() { batch.End(ctx, err) }()
	defer c.g.cfg.unsettled(ds, &err)
	for i := range ds {
		d := &ds[i]
		dec, ok := c.g.cfg.Prepare(d)
		if ok {
			if dec, err = c.apply(ctx, d); err != nil {
				return false, err
			}
		} else {
			c.g.cfg.Start(ctx, d)
		}
		if err := c.g.settle(ctx, d, dec); err != nil {
			return false, err
		}
		batch.Count(dec)
	}
	return true, nil
}

// apply runs d through keystore.Do until it reaches a final decision, each
// run under a span of its own (the key store calls and the handler nest
// under it). An error (the store failed, ctx ended) stops the consumer:
// fail closed.
func (c *KeystoreConsumer) apply(ctx context.Context, d *delivery) (consume.Decision, error) {
	sctx := c.g.cfg.Start(ctx, d)
	for waits := 0; ; {
		_, replayed, err := keystore.Do(sctx, c.s, d.Key, d.Fingerprint, func(ctx context.Context) ([]byte, error) {
			if err := c.h(ctx, d.Msg); err != nil {
				return nil, &handlerError{err}
			}
			return nil, nil
		}, c.g.cfg.doOpts...)
		var he *handlerError
		switch {
		case errors.Is(err, keystore.ErrInProgress):
			// Another holder (a previous owner of the partition) runs it;
			// its lease bounds the wait. Not a handler failure.
			waits++
			if werr := c.g.cfg.Backoff.Wait(ctx, min(waits, 8)-1); werr != nil {
				return consume.Decision{}, werr
			}
			continue
		case errors.As(err, &he):
			err = he.err
		case err != nil && !errors.Is(err, idem.ErrFingerprintMismatch):
			return consume.Decision{}, fmt.Errorf("idemkafka: %s: %w", where(d.Msg), err) // store down: fail closed
		}
		dec := c.g.cfg.Decide(d, !replayed, err)
		if dec.Outcome != idem.Retried {
			return dec, nil
		}
		if err := c.g.cfg.rerun(ctx, d, dec); err != nil {
			return consume.Decision{}, err
		}
		sctx = c.g.cfg.Start(ctx, d)
	}
}
