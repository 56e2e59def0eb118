package idemkafka_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem/adapters/idemkafka"
)

// The crash tests run each consumer instance as this test binary,
// re-executed with txnChildEnv set: init then runs the consume loop instead
// of the tests, against the kfake cluster of the parent test (its address in
// txnChildEnv+"_ADDR"), and the parent kills it with SIGKILL (or stops it
// with SIGSTOP) at the points the child announces on stdout.
const txnChildEnv = "IDEM_KAFKA_TXN_CHILD"

// Kill points (txnChildEnv+"_KILL"), each "point:K": the child acts at its
// K-th record or later.
const (
	// killBeforeCommit: the handler blocks once records of the open
	// transaction (plain loop: of the uncommitted batch) are acknowledged
	// by the broker; the child prints "BLOCKED" and waits to be killed.
	killBeforeCommit = "before-commit"
	// killAfterCommit: right after a commit, the child prints "BLOCKED" and
	// waits to be killed.
	killAfterCommit = "after-commit"
	// killRebalance: like killBeforeCommit, and then, when the group
	// revokes partitions, the revoke callback prints "REVOKED" and blocks
	// the rebalance until the child is killed.
	killRebalance = "rebalance"
	// killZombie: like killBeforeCommit, but the handler then waits for a
	// line on stdin (sent after SIGSTOP, a newer instance's takeover, and
	// SIGCONT) and goes on; the child prints "RUN fenced=<bool> err=<err>"
	// when Run returns.
	killZombie = "zombie"
)

func init() {
	if os.Getenv(txnChildEnv) == "" {
		return
	}
	if err := runTxnChild(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// txnChild is one consumer instance's counters. acked counts output records
// the broker acknowledged; ackedAtCommit is acked at the last commit.
type txnChild struct {
	out, life  string
	point      string
	k          int
	processed  int
	mu         sync.Mutex
	returned   int
	acked      int
	ackedAtCmt int
	blocked    bool
	armed      bool // the rebalance point: the handler is blocked
	stdin      *bufio.Reader
}

func (ch *txnChild) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err == nil && r.Topic == ch.out {
		ch.mu.Lock()
		ch.acked++
		ch.mu.Unlock()
	}
}

func say(line string) { fmt.Fprintln(os.Stdout, line) }

// handle maps a payment to its ledger entry: same key and value, and a
// "life" header naming the process that produced it.
func (ch *txnChild) handle(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
	ch.processed++
	if !ch.blocked && ch.processed >= ch.k && ch.inOpenBatch() {
		switch ch.point {
		case killBeforeCommit:
			say("BLOCKED")
			select {}
		case killRebalance:
			ch.mu.Lock()
			ch.armed = true
			ch.mu.Unlock()
			say("BLOCKED")
			select {}
		case killZombie:
			ch.blocked = true
			say("BLOCKED")
			_, _ = ch.stdin.ReadString('\n')
		}
	}
	ch.mu.Lock()
	ch.returned++
	ch.mu.Unlock()
	return []*kgo.Record{{
		Topic:   ch.out,
		Key:     r.Key,
		Value:   r.Value,
		Headers: []kgo.RecordHeader{{Key: "life", Value: []byte(ch.life)}},
	}}, nil
}

// inOpenBatch waits until every record returned so far is acknowledged, and
// reports whether some of them belong to the batch not yet committed.
func (ch *txnChild) inOpenBatch() bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch.mu.Lock()
		done, open := ch.acked >= ch.returned, ch.acked > ch.ackedAtCmt
		ch.mu.Unlock()
		if done || time.Now().After(deadline) {
			return open
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (ch *txnChild) committed() {
	ch.mu.Lock()
	ch.ackedAtCmt = ch.acked
	ch.mu.Unlock()
	if ch.point == killAfterCommit && ch.processed >= ch.k {
		say("BLOCKED")
		select {}
	}
}

func (ch *txnChild) revoked(_ context.Context, _ *kgo.Client, rev map[string][]int32) {
	ch.mu.Lock()
	armed := ch.armed
	ch.mu.Unlock()
	if armed && len(rev) > 0 {
		say("REVOKED")
		select {}
	}
}

func runTxnChild() error {
	get := func(k string) string { return os.Getenv(txnChildEnv + "_" + k) }
	ch := &txnChild{out: get("OUT"), life: get("LIFE"), stdin: bufio.NewReader(os.Stdin), k: 1 << 30}
	if p := get("KILL"); p != "" {
		point, k, _ := strings.Cut(p, ":")
		n, err := strconv.Atoi(k)
		if err != nil {
			return err
		}
		ch.point, ch.k = point, n
	}
	kopts := []kgo.Opt{
		kgo.SeedBrokers(get("ADDR")),
		kgo.ConsumerGroup(get("GROUP")),
		kgo.ConsumeTopics(get("IN")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.SessionTimeout(2 * time.Second),
		kgo.RebalanceTimeout(5 * time.Second),
		kgo.WithHooks(ch),
		kgo.OnPartitionsRevoked(ch.revoked),
	}
	ctx := context.Background()
	if get("MODE") == "plain" {
		return runPlain(ctx, ch, kopts)
	}
	c, err := idemkafka.NewTransactional(get("ID"), ch.handle,
		append(kopts, kgo.TransactionTimeout(10*time.Second)),
		idemkafka.WithBatchSize(10),
		// Outcomes are reported after the commit: the committed hook.
		idemkafka.WithObserver(func(idemkafka.Event) { ch.committed() }),
	)
	if err != nil {
		return err
	}
	say("READY")
	err = c.Run(ctx)
	say(fmt.Sprintf("RUN fenced=%v err=%v", errors.Is(err, idemkafka.ErrFenced), err))
	c.Close()
	return nil
}

// runPlain is the loop without transactions: consume, produce each output
// and wait for its acknowledgement, then commit the batch's offsets.
func runPlain(ctx context.Context, ch *txnChild, kopts []kgo.Opt) error {
	cl, err := kgo.NewClient(append(kopts, kgo.DisableAutoCommit())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	say("READY")
	for {
		fs := cl.PollRecords(ctx, 10)
		if fs.IsClientClosed() {
			return nil
		}
		var perr error
		fs.EachRecord(func(r *kgo.Record) {
			outs, _ := ch.handle(ctx, r)
			if err := cl.ProduceSync(ctx, outs...).FirstErr(); err != nil && perr == nil {
				perr = err
			}
		})
		if perr != nil {
			return perr
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return err
		}
		ch.committed()
	}
}
