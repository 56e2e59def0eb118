package idemkafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
)

// group is the consumer-group transport of Consumer, OffsetConsumer and
// KeystoreConsumer: it owns the franz-go client, hands each partition's
// polled records to apply, marks the partition's last offset when apply
// allows it, commits the marks on revoke and on Close, and produces dead
// letters.
type group struct {
	loop
	cl    *kgo.Client
	name  string // the consumer group
	cfg   config
	apply func(ctx context.Context, recs []*kgo.Record) (mark bool, err error)
	// ready is closed once cl and name are set: franz-go may call the
	// group callbacks from inside kgo.NewClient's goroutines before that.
	ready chan struct{}
}

// newGroup validates opts for the constructor ctor, which takes the options
// in allowed.
func newGroup(opts []Option, allowed optKind, ctor string) (*group, error) {
	cfg, err := newConfig(opts, allowed, ctor)
	if err != nil {
		return nil, err
	}
	return &group{cfg: cfg, ready: make(chan struct{})}, nil
}

// start builds the client from kopts and extra, after which the consumer
// may run. apply processes one partition's records.
func (g *group) start(kopts []kgo.Opt, apply func(context.Context, []*kgo.Record) (bool, error), extra ...kgo.Opt) error {
	all := append(append([]kgo.Opt(nil), kopts...),
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.OnPartitionsRevoked(g.onRevoked),
		kgo.OnPartitionsLost(g.onLost),
	)
	all = append(all, extra...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return clientError(all, err)
	}
	name, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	if name == "" {
		cl.Close()
		return errNoGroup
	}
	g.cl, g.name, g.apply = cl, name, apply
	g.loop = loop{p: cl, closeCl: cl.CloseAllowingRebalance, batch: g.cfg.BatchSize, log: g.cfg.Logger, process: g.processFetches}
	close(g.ready)
	return nil
}

func (g *group) processFetches(ctx context.Context, fetches kgo.Fetches) error {
	var err error
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if err != nil || len(p.Records) == 0 {
			return
		}
		var mark bool
		if mark, err = g.apply(ctx, p.Records); err == nil && mark {
			g.cl.MarkCommitRecords(p.Records[len(p.Records)-1])
		}
	})
	return err
}

// onRevoked runs between polls (BlockRebalanceOnPoll): no record of a revoked
// partition is being processed, and every mark belongs to a committed effect.
func (g *group) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		g.cfg.Logger.Warn("idemkafka: commit on revoke failed; the new owner will see duplicates", "err", err, "revoked", revoked)
	}
}

// onLost: the partitions may already belong to another member, so committing
// could move its offsets; the marks are dropped and the new owner re-reads
// from the last commit (the inbox absorbs the duplicates).
func (g *group) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	g.cfg.Logger.Warn("idemkafka: partitions lost", "lost", lost)
}

// settle performs dec, a final decision (not idem.Retried), for d and
// reports it: a dead letter is produced first. An error means d must not be
// marked.
func (g *group) settle(ctx context.Context, d *delivery, dec consume.Decision) error {
	if dec.Outcome == idem.DeadLettered {
		if err := g.deadLetter(ctx, d, dec); err != nil {
			return err
		}
	}
	g.cfg.Report(d, dec)
	return nil
}

// deadLetter produces d's record to the dead-letter topic and waits for the
// broker's acknowledgement. If that fails (or there is no such topic, or a
// keyless record meets StopOnMissing), the error is returned and the caller
// must not mark the record: it is never acknowledged unless it has been
// applied or dead-lettered.
func (g *group) deadLetter(ctx context.Context, d *delivery, dec consume.Decision) error {
	r := d.Msg
	if !ran(dec) && g.cfg.missing == StopOnMissing && dec.Reason != idem.ReasonInvalidFingerprint {
		return fmt.Errorf("idemkafka: %s: %w", where(r), dec.Err)
	}
	if g.cfg.dlq == "" {
		return fmt.Errorf("idemkafka: %s (%s): no dead-letter topic: %w: %w", where(r), dec.Reason, ErrDeadLetter, dec.Err)
	}
	out := deadLetterRecord(g.cfg.dlq, g.name, r, dec.Reason, runs(d, dec), dec.Err)
	if err := g.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
		return fmt.Errorf("idemkafka: %s (%s): produce to %q: %w: %w", where(r), dec.Reason, g.cfg.dlq, ErrDeadLetter, err)
	}
	return nil
}
