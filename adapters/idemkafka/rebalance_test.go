package idemkafka_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
)

// TestRebalanceMidBatch: a second member joins while the first is in the
// middle of a batch. The first finishes the batch, commits its marks on
// revoke, and hands partitions over; every record's effect is applied exactly
// once across both members.
func TestRebalanceMidBatch(t *testing.T) {
	t.Parallel()
	wave1 := ids("c1", 40)
	f := newFixture(t, 4, wave1...)
	c, db, eff := f.c, f.db, f.eff

	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	base := eff.handler("1")
	h1 := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		once.Do(func() {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		return base(ctx, tx, r)
	}
	t1, t2 := newTally(), newTally()
	in1, in2 := newInbox(t, db, "g"), newInbox(t, db, "g") // migrate before member 1 holds the write lock
	con1, err := idemkafka.NewConsumer(in1, h1, groupOpts(c, "g", "orders"), t1.option())
	if err != nil {
		t.Fatal(err)
	}
	stop1 := running(t, con1)
	<-entered
	con2, err := idemkafka.NewConsumer(in2, eff.handler("2"), groupOpts(c, "g", "orders"), t2.option())
	if err != nil {
		t.Fatal(err)
	}
	stop2 := running(t, con2)
	time.Sleep(300 * time.Millisecond) // let the join reach the group: the rebalance now waits for member 1
	close(release)

	// Once member 2 holds partitions, a second wave is split between both.
	waitFor(t, "wave 1", func() bool { return len(eff.counts(t)) == len(wave1) })
	adm := kadm.NewClient(client(t, c))
	waitFor(t, "both members assigned", func() bool { return membersWithPartitions(t, adm, "g") == 2 })
	wave2 := ids("c2", 40)
	produce(t, c, "orders", wave2...)
	all := append(append([]string(nil), wave1...), wave2...)
	waitFor(t, "wave 2", func() bool { return len(eff.counts(t)) == len(all) })
	time.Sleep(200 * time.Millisecond) // let stragglers (duplicates) land
	_ = stop1()
	_ = stop2()
	eff.requireOnce(t, all)
	if t2.get(idem.Applied) == 0 || t1.get(idem.Applied) == 0 {
		t.Errorf("applied by member 1: %d, member 2: %d; want both > 0", t1.get(idem.Applied), t2.get(idem.Applied))
	}
	// Member 1 committed its marks when its partitions were revoked, so
	// member 2 starts after them: no record is consumed twice.
	if d := t2.get(idem.Duplicate); d != 0 {
		t.Errorf("member 2 saw %d duplicates; the revoke did not commit member 1's marks", d)
	}
	t.Logf("member 1: %d applied, %d duplicates; member 2: %d applied, %d duplicates",
		t1.get(idem.Applied), t1.get(idem.Duplicate), t2.get(idem.Applied), t2.get(idem.Duplicate))
	requireCommittedToEnd(t, c, "g", "orders")
}

// TestOffsetsInDatabase: the offset commits with the effect; the process
// dies after the database commit and before any Kafka commit; the restarted
// consumer seeks to the stored offset, so nothing is applied twice although no
// inbox key exists.
func TestOffsetsInDatabase(t *testing.T) {
	t.Parallel()
	wave1 := ids("f1", 30)
	f := newFixture(t, 2, wave1...)
	f.block.Store(true)
	first := newTally()
	_ = runUntil(t, f.offsetConsumer(f.eff.handler("1"), first.option()), first, len(wave1))
	if got := committed(t, f.c, "g", "orders"); len(got) != 0 {
		t.Fatalf("Kafka offsets committed despite the broker rejecting commits: %v", got)
	}
	var stored int64
	if err := f.db.QueryRow(`SELECT SUM(next_offset) FROM idem_kafka_offsets WHERE group_id = 'g'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != int64(len(wave1)) {
		t.Fatalf("stored offsets sum to %d, want %d", stored, len(wave1))
	}

	f.block.Store(false)
	wave2 := ids("f2", 10)
	produce(t, f.c, "orders", wave2...)
	second := newTally()
	stop2 := running(t, f.offsetConsumer(f.eff.handler("2"), second.option()))
	waitFor(t, "wave 2", func() bool { return second.total() >= len(wave2) })
	time.Sleep(200 * time.Millisecond) // a re-consumed wave 1 would show up here
	_ = stop2()
	if n := second.total(); n != len(wave2) {
		t.Errorf("restarted consumer processed %d records, want %d (it must seek past wave 1)", n, len(wave2))
	}
	f.eff.requireOnce(t, append(append([]string(nil), wave1...), wave2...))
	var tables int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'idem_inbox'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("an inbox table exists; offsets mode must not use keys")
	}
	f.requireCommittedToEnd()
}

// membersWithPartitions counts the members of a stable group that hold at
// least one partition.
func membersWithPartitions(t *testing.T, adm *kadm.Client, group string) int {
	t.Helper()
	gs, err := adm.DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	g := gs[group]
	if g.State != "Stable" {
		return 0
	}
	n := 0
	for _, m := range g.Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, tp := range ca.Topics {
			if len(tp.Partitions) > 0 {
				n++
				break
			}
		}
	}
	return n
}

// TestOffsetsFenced: another member advances the stored offset while this one
// holds records fetched from the older position (a zombie's view). The
// conditional offset update fails, the batch rolls back with its effects, and
// the consumer seeks to the stored offset: records 0..4, applied by "the other
// member", are not applied again.
func TestOffsetsFenced(t *testing.T) {
	t.Parallel()
	all := ids("z", 10)
	f := newFixture(t, 1, all...)
	c, db := f.c, f.db
	ta := newTally()
	con := f.offsetConsumer(f.eff.handler("1"), ta.option())
	if _, err := db.Exec(`INSERT INTO idem_kafka_offsets VALUES ('g', 'orders', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	// Hold the first fetch of partition data (the consumer has already sought
	// to offset 0) while "the other member" commits offsets 0..4.
	var once sync.Once
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() {
			if _, err := db.Exec(`UPDATE idem_kafka_offsets SET next_offset = 5`); err != nil {
				t.Error(err)
			}
		})
		return nil, nil, false
	})
	stop := running(t, con)
	waitFor(t, "records 5..9", func() bool { return ta.total() >= 5 })
	time.Sleep(100 * time.Millisecond)
	_ = stop()
	f.eff.requireOnce(t, all[5:])
	var next int64
	if err := db.QueryRow(`SELECT next_offset FROM idem_kafka_offsets`).Scan(&next); err != nil || next != 10 {
		t.Errorf("stored offset %d (%v), want 10", next, err)
	}
}
