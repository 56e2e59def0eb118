package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/internal/testenv"
)

// TestTransactMixedInboxOutputIDs is the mixed shape that a Kafka
// transaction cannot cover: a handler with a database effect that also
// produces to Kafka. The database effect goes through an inbox; the output
// carries OutputID, stable across runs. The handler's first run for one
// payment fails after its output is in Kafka (the window between the produce
// and the database commit, where a crash would land too): the database
// rolls back, the record is retried, and the output is produced again. The
// topic then holds copies with one id, and a downstream inbox consumer
// applies each output once.
func TestTransactMixedInboxOutputIDs(t *testing.T) {
	t.Parallel()
	c := cluster(t, 1, "payments", "ledger")
	pays := ids("m", 10)
	produce(t, c, "payments", pays...)
	pcl := client(t, c)

	upDB := testenv.SQLite(t)
	upEff := newEffects(t, upDB)
	apply := upEff.handler("up")
	var failed atomic.Bool
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if err := apply(ctx, tx, r); err != nil {
			return err
		}
		id, err := idemkafka.OutputID("billing", r, 0)
		if err != nil {
			return err
		}
		out := &kgo.Record{Topic: "ledger", Key: r.Key, Value: r.Value}
		idemkafka.SetID(out, id)
		if err := pcl.ProduceSync(ctx, out).FirstErr(); err != nil {
			return err
		}
		if string(r.Value) == pays[3] && failed.CompareAndSwap(false, true) {
			return errors.New("database commit lost after the produce")
		}
		return nil
	}
	up := newTally()
	con, err := idemkafka.NewConsumer(newInbox(t, upDB, "billing"), h, groupOpts(c, "billing", "payments"),
		up.option(), idemkafka.WithMaxAttempts(3), idemkafka.WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, con)
	waitFor(t, "upstream outcomes", func() bool { return up.total() == len(pays) })
	_ = stop()
	upEff.requireOnce(t, pays)
	// The failed run's output, and those of any run the inbox replayed, are
	// in the topic: the inbox replays a failed batch one record at a time.
	copies := len(readAll(t, c, "ledger", false))
	if copies <= len(pays) {
		t.Fatalf("ledger holds %d records for %d payments: no output was produced twice", copies, len(pays))
	}

	downDB := testenv.SQLite(t)
	downEff := newEffects(t, downDB)
	down := newTally()
	dcon, err := idemkafka.NewConsumer(newInbox(t, downDB, "ledger-reader"), downEff.handler("down"),
		groupOpts(c, "ledger-reader", "ledger"), down.option())
	if err != nil {
		t.Fatal(err)
	}
	dstop := running(t, dcon)
	waitFor(t, "downstream outcomes", func() bool { return down.total() == copies })
	_ = dstop()
	downEff.requireOnce(t, pays)
	if a, d := down.get(idem.Applied), down.get(idem.Duplicate); a != len(pays) || d != copies-len(pays) {
		t.Errorf("downstream: %d applied, %d duplicates; want %d, %d", a, d, len(pays), copies-len(pays))
	}
}
