package idemkafka_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// TestTransactCrash kills consumer processes with SIGKILL after producing
// and before the commit, after the commit, and during a rebalance, once with
// the plain loop (consume, produce, commit offsets) and once with the
// TransactConsumer, on the same 200 payments. A read_committed reader of the
// ledger then finds every entry of the transactional loop exactly once and in
// order per key, and duplicates from the plain one.
//
// The lives of each loop, in one group: a1 is killed before a commit (at its
// 25th record or later, once records of the open batch are acknowledged);
// a2, with the same transactional id, after a commit; a3 before a commit
// and then, when b1 joins and the group revokes a3's partitions, during the
// rebalance; a4 (the same id again) and b1 finish.
func TestTransactCrash(t *testing.T) {
	t.Parallel()
	const n = 200
	c := txnCluster(t, "payments", "ledger-plain", "ledger-txn")
	payments(t, c, "payments", n)
	for _, mode := range []string{"plain", "txn"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			group, out := "g-"+mode, "ledger-"+mode
			spec := func(id, life, kill string) childSpec {
				return childSpec{mode: mode, id: id, life: life, group: group, in: "payments", out: out, kill: kill}
			}
			a1 := startChild(t, c, spec("a", "a1", killBeforeCommit+":25"))
			a1.await("BLOCKED")
			a1.kill()
			a2 := startChild(t, c, spec("a", "a2", killAfterCommit+":25"))
			a2.await("BLOCKED")
			a2.kill()
			a3 := startChild(t, c, spec("a", "a3", killRebalance+":25"))
			a3.await("BLOCKED")
			b1 := startChild(t, c, spec("b", "b1", ""))
			a3.await("REVOKED")
			a3.kill()
			a4 := startChild(t, c, spec("a", "a4", ""))
			waitCommitted(t, c, group, "payments")
			b1.kill()
			a4.kill()

			rc := checkLedger(readAll(t, c, out, true), n)
			ru := checkLedger(readAll(t, c, out, false), n)
			t.Logf("%s: read_committed sees %d entries, %d duplicates, %d missing, %d keys out of order, by life %v; read_uncommitted sees %d",
				mode, rc.records, rc.duplicates, rc.missing, rc.outOfOrder, rc.lives, ru.records)
			if rc.missing != 0 {
				t.Errorf("%d payments have no ledger entry", rc.missing)
			}
			if mode == "plain" {
				if rc.duplicates == 0 {
					t.Errorf("the plain loop produced no duplicates under the same kills: the kills did not land between produce and commit")
				}
				return
			}
			if rc.duplicates != 0 || rc.outOfOrder != 0 || rc.records != n {
				t.Errorf("transactional loop: %d entries, %d duplicates, %d keys out of order; want %d, 0, 0", rc.records, rc.duplicates, rc.outOfOrder, n)
			}
			if ru.records <= n {
				t.Errorf("read_uncommitted sees %d entries: no aborted output, so no kill landed after producing", ru.records)
			}
		})
	}
}

// TestTransactZombieFenced: instance z1 has produced part of a batch when
// it is frozen (SIGSTOP, as a long GC pause or a partition would) past its
// session timeout. z2 starts with the same transactional id, which fences
// z1 and aborts its transaction, and processes everything. Then z1 resumes
// and tries to finish its batch: Run returns an error wrapping ErrFenced,
// and none of the records z1 produced in that transaction are visible.
func TestTransactZombieFenced(t *testing.T) {
	t.Parallel()
	const n = 100
	c := txnCluster(t, "payments", "ledger")
	payments(t, c, "payments", n)
	spec := func(life, kill string) childSpec {
		return childSpec{mode: "txn", id: "z", life: life, group: "g", in: "payments", out: "ledger", kill: kill}
	}
	z1 := startChild(t, c, spec("z1", killZombie+":15"))
	z1.await("BLOCKED")
	z1.signal(syscall.SIGSTOP)
	z2 := startChild(t, c, spec("z2", ""))
	waitCommitted(t, c, "g", "payments")
	z2.kill()
	if _, err := z1.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	z1.signal(syscall.SIGCONT)
	line := z1.await("RUN")
	t.Logf("zombie: %s", line)
	if !strings.Contains(line, "fenced=true") {
		t.Errorf("zombie's Run: %s; want an error wrapping ErrFenced", line)
	}
	rc := checkLedger(readAll(t, c, "ledger", true), n)
	ru := checkLedger(readAll(t, c, "ledger", false), n)
	t.Logf("read_committed: %d entries by life %v; read_uncommitted: %d by life %v", rc.records, rc.lives, ru.records, ru.lives)
	if rc.records != n || rc.duplicates != 0 || rc.missing != 0 || rc.outOfOrder != 0 {
		t.Errorf("read_committed: %d entries, %d duplicates, %d missing, %d keys out of order; want %d, 0, 0, 0",
			rc.records, rc.duplicates, rc.missing, rc.outOfOrder, n)
	}
	if ru.lives["z1"] <= rc.lives["z1"] {
		t.Errorf("z1 wrote %d entries, %d visible: the fenced transaction produced nothing, so nothing was fenced", ru.lives["z1"], rc.lives["z1"])
	}
}

// TestTransactAbortOnHandlerError: a record whose handler fails for good,
// with no dead-letter topic, aborts the whole transaction: the entries of
// the records before it in the batch are not visible, no offset is
// committed, Run returns ErrDeadLetter, and the next instance (the same
// transactional id) processes the batch from the start. With a dead-letter
// topic, the record is dead-lettered in the transaction, exactly once.
func TestTransactAbortOnHandlerError(t *testing.T) {
	t.Parallel()
	c := txnCluster(t, "payments", "ledger", "dlq")
	payments(t, c, "payments", 20)
	poison := func(r *kgo.Record) bool { return string(r.Value) == "acct-3:1" }
	h := func(fail bool) idemkafka.TransactHandler {
		return func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
			if fail && poison(r) {
				return nil, idem.Permanent(errors.New("bad payment"))
			}
			return []*kgo.Record{{Topic: "ledger", Key: r.Key, Value: r.Value}}, nil
		}
	}
	kopts := groupOpts(c, "g", "payments")
	first, err := idemkafka.NewTransactional("inst-0", h(true), kopts, idemkafka.WithMaxAttempts(1), idemkafka.WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	err = first.Run(context.Background())
	first.Close()
	if !errors.Is(err, idemkafka.ErrDeadLetter) {
		t.Fatalf("Run = %v, want ErrDeadLetter", err)
	}
	if got := readAll(t, c, "ledger", true); len(got) != 0 {
		t.Errorf("read_committed sees %d entries of the aborted transaction", len(got))
	}
	if got := committed(t, c, "g", "payments"); len(got) != 0 {
		t.Errorf("offsets committed by the aborted transaction: %v", got)
	}

	ta := newTally()
	second, err := idemkafka.NewTransactional("inst-0", h(true), kopts, ta.option(),
		idemkafka.WithDeadLetter("dlq"), idemkafka.WithMaxAttempts(2), idemkafka.WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, second)
	waitFor(t, "20 outcomes", func() bool { return ta.total() == 20 })
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	lc := checkLedger(readAll(t, c, "ledger", true), 20)
	if lc.records != 19 || lc.duplicates != 0 || lc.missing != 1 {
		t.Errorf("ledger: %d entries, %d duplicates, %d missing; want 19, 0, 1", lc.records, lc.duplicates, lc.missing)
	}
	dl := readAll(t, c, "dlq", true)
	if len(dl) != 1 || header(dl[0], idemkafka.HeaderDLQReason) != string(idem.ReasonPermanent) || !poison(dl[0]) {
		t.Fatalf("dead letters: %d, want the poison payment once with reason %q", len(dl), string(idem.ReasonPermanent))
	}
	ta.want(t, "outcomes", map[idem.Outcome]int{idem.Applied: 19, idem.DeadLettered: 1})
}

func TestOutputID(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Topic: "payments", Partition: 1, Offset: 7}
	a, _ := idemkafka.OutputID("ledger", r, 0)
	b, _ := idemkafka.OutputID("ledger", r, 1)
	again, _ := idemkafka.OutputID("ledger", &kgo.Record{Topic: "payments", Partition: 1, Offset: 7}, 0)
	other, _ := idemkafka.OutputID("audit", r, 0)
	if a != again || a == b || a == other {
		t.Errorf("offset ids: %s %s %s %s", a, b, again, other)
	}
	idemkafka.SetID(r, "pay-7")
	byID, _ := idemkafka.OutputID("ledger", r, 0)
	moved, _ := idemkafka.OutputID("ledger", func() *kgo.Record { c := *r; c.Offset = 99; return &c }(), 0)
	if byID == a || byID != moved {
		t.Errorf("a record with an idem-id keeps its output ids across offsets: %s vs %s", byID, moved)
	}
	if err := idem.ValidateKey(byID); err != nil {
		t.Error(err)
	}
	if _, err := idemkafka.OutputID("ledger", nil, 0); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil record: %v", err)
	}
}

// TestTransactRebalanceAborts: member 1 is in the middle of a transaction
// when member 2 joins and the group revokes some of member 1's partitions.
// Member 1's End then aborts instead of committing (committed=false, no
// error), Run goes on, and the batch is consumed again by the partitions'
// owners: every entry is visible once, in order per key.
func TestTransactRebalanceAborts(t *testing.T) {
	t.Parallel()
	const n = 100
	c := txnCluster(t, "payments", "ledger")
	payments(t, c, "payments", n)
	revoked := make(chan struct{})
	var once sync.Once
	onRevoked := kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, rev map[string][]int32) {
		if len(rev) > 0 {
			once.Do(func() { close(revoked) })
		}
	})
	var held atomic.Bool
	ledger := func(wait bool) idemkafka.TransactHandler {
		return func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
			if wait && held.CompareAndSwap(false, true) {
				select { // hold the open transaction until the rebalance revokes
				case <-revoked:
				case <-time.After(20 * time.Second):
				}
			}
			return []*kgo.Record{{Topic: "ledger", Key: r.Key, Value: r.Value}}, nil
		}
	}
	var logs testenv.SyncBuffer
	ta := newTally()
	m1, err := idemkafka.NewTransactional("m1", ledger(true), append(groupOpts(c, "g", "payments"), onRevoked),
		ta.option(), idemkafka.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), idemkafka.WithBatchSize(10))
	if err != nil {
		t.Fatal(err)
	}
	stop1 := running(t, m1)
	waitFor(t, "member 1 holding a transaction", held.Load)
	m2, err := idemkafka.NewTransactional("m2", ledger(false), groupOpts(c, "g", "payments"), ta.option())
	if err != nil {
		t.Fatal(err)
	}
	stop2 := running(t, m2)
	waitCommitted(t, c, "g", "payments")
	if err := stop1(); !errors.Is(err, context.Canceled) {
		t.Errorf("member 1: Run = %v", err)
	}
	if err := stop2(); !errors.Is(err, context.Canceled) {
		t.Errorf("member 2: Run = %v", err)
	}
	if !strings.Contains(logs.String(), "transaction aborted by a rebalance") {
		t.Errorf("member 1's transaction was not aborted by the rebalance; log:\n%s", logs.String())
	}
	rc := checkLedger(readAll(t, c, "ledger", true), n)
	if rc.records != n || rc.duplicates != 0 || rc.missing != 0 || rc.outOfOrder != 0 {
		t.Errorf("read_committed: %d entries, %d duplicates, %d missing, %d keys out of order; want %d, 0, 0, 0",
			rc.records, rc.duplicates, rc.missing, rc.outOfOrder, n)
	}
	ta.want(t, "outcomes only after a commit", map[idem.Outcome]int{idem.Applied: n})
}
