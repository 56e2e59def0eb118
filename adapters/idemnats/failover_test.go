package idemnats_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/testsupport/natsenv"
	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// kill -9 of the stream leader, and later of the consumer leader, of an R3
// stream on a 3-server cluster, under load: Publishers send every message
// with a stable Nats-Msg-Id and retry a failed publish with the same id
// until it is acknowledged; two Consumers apply them through a SQLite inbox
// with the effect in the same transaction. Each killed server is restarted
// once a new leader is elected (an R3 group survives the loss of one
// server, not of two: the second kill needs the first server back). The
// docs promise: nothing acknowledged is lost (every PubAck's sequence is
// delivered with its id), nothing is applied twice (redeliveries, and
// copies the stream stored twice, are absorbed by the inbox), and in the
// end every message is applied exactly once and acked.
//
// The load is N messages at about 500 msgs/s: 3,000 (6 s of load) by
// default, 1,500 per second of IDEM_SOAK for make soak.
func TestLeaderKilled(t *testing.T) {
	const (
		rate       = 500 // msgs/s, all publishers together
		publishers = 8
		consumers  = 2
		ackWait    = 3 * time.Second
	)
	soak := testenv.Soak(t)
	n := max(3000, int(3*soak.Seconds()*rate))
	patience := 2*time.Minute + 3*soak // for each wait; the machine may be loaded
	ctx := context.Background()

	c := natsenv.Start(t)
	_, js := c.Connect(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1, Replicas: 3,
	}); err != nil {
		t.Fatal(err)
	}
	streamInfo := natsenv.StreamInfo(ctx, js, "ORDERS")
	consInfo := natsenv.ConsumerInfo(ctx, js, "ORDERS", "worker")
	natsenv.WaitCurrent(t, patience, "stream", streamInfo)
	natsenv.WaitCurrent(t, patience, "consumer", consInfo)

	e := newEffects(t)
	log := newFailoverLog()
	var runs []*consumetest.Runner
	stopRuns := sync.OnceFunc(func() {
		for _, r := range runs {
			_ = r.Stop(t)
		}
	})
	for range consumers {
		_, cjs := c.Connect(t)
		cons, err := cjs.Consumer(ctx, "ORDERS", "worker")
		if err != nil {
			t.Fatal(err)
		}
		ic, err := idemnats.NewConsumer(cons, e.In, e.apply, idemnats.WithBatchSize(100), idemnats.WithObserver(log.observe))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, start(ic))
	}
	t.Cleanup(stopRuns) // before their connections close

	_, pjs := c.Connect(t)
	pub, err := idemnats.NewPublisher(pjs, idemnats.WithPublishRetries(3, 250*time.Millisecond), idemnats.WithPublishTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	var pubs sync.WaitGroup
	pubErr := make(chan error, publishers)
	for g := range publishers {
		pubs.Go(func() {
			interval := publishers * time.Second / rate
			for i := g; i < n; i += publishers {
				sent := time.Now()
				if err := log.publish(pubCtx, pub, i, patience); err != nil {
					pubErr <- err
					return
				}
				time.Sleep(interval - time.Since(sent)) // no catching up after an outage
			}
		})
	}

	// kill SIGKILLs the leader of what (info) once at of the n messages are
	// published, waits for another leader to be elected, and restarts it.
	kill := func(what, other string, info, otherInfo natsenv.ClusterInfo, at int) (killed time.Time, elect time.Duration) {
		waitFor(t, patience, fmt.Sprintf("%d of the publishes", at), func() bool { return log.ackedCount() >= at })
		victim := c.WaitLeader(t, patience, what, "", info)
		now := c.WaitLeader(t, patience, other, "", otherInfo)
		killed = time.Now()
		victim.Kill()
		t.Logf("%.1fs: killed %s leader %s (%s leader %s) with %d of %d published, %d applied",
			killed.Sub(begin).Seconds(), what, victim.Name(), other, now.Name(), log.ackedCount(), n, log.appliedCount())
		elected := c.WaitLeader(t, patience, what, victim.Name(), info)
		elect = time.Since(killed)
		t.Logf("%s leader %s elected %.1fs after the kill", what, elected.Name(), elect.Seconds())
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		return killed, elect
	}
	// The stream leader, a third of the way in; the consumer leader, two
	// thirds of the way in.
	kill1, elect1 := kill("stream", "consumer", streamInfo, consInfo, n/3)
	natsenv.WaitCurrent(t, patience, "stream after restart", streamInfo)
	natsenv.WaitCurrent(t, patience, "consumer after restart", consInfo)
	kill2, elect2 := kill("consumer", "stream", consInfo, streamInfo, 2*n/3)

	pubs.Wait()
	close(pubErr)
	for err := range pubErr {
		t.Fatal(err)
	}
	published := time.Now()
	waitFor(t, patience, "every message applied", func() bool { return log.appliedCount() >= n })
	applied := time.Now()
	// Acks lost with the consumer leader come back after AckWait as
	// redeliveries, which the inbox settles as duplicates.
	var ci *jetstream.ConsumerInfo
	waitFor(t, patience, "nothing pending or unacknowledged", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		cons, err := js.Consumer(cctx, "ORDERS", "worker")
		if err != nil {
			return false
		}
		ci = cons.CachedInfo()
		return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.NumRedelivered == 0
	})
	drained := time.Now()
	stopRuns()
	st, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	state := st.CachedInfo().State

	// Every message's effect once, in the database.
	counts := e.Counts(t)
	total := 0
	for i := range n {
		id := orderID(i)
		if counts[id] != 1 {
			t.Errorf("%s applied %d times, want 1", id, counts[id])
		}
		total += counts[id]
	}
	if len(counts) != n || total != n {
		t.Errorf("effects: %d keys, %d rows; want %d and %d", len(counts), total, n, n)
	}
	r := log.report(t, n, kill1, kill2)
	t.Logf("N=%d in %.1fs (all published at %.1fs, all applied at %.1fs, nothing pending at %.1fs); stream: %d messages stored, last seq %d",
		n, time.Since(begin).Seconds(), published.Sub(begin).Seconds(), applied.Sub(begin).Seconds(), drained.Sub(begin).Seconds(), state.Msgs, state.LastSeq)
	t.Logf("elections: stream %.1fs, consumer %.1fs; outage after the stream-leader kill: publishes %.1fs, applies %.1fs; after the consumer-leader kill: publishes %.1fs, applies %.1fs",
		elect1.Seconds(), elect2.Seconds(), r.pubOutage1.Seconds(), r.applyOutage1.Seconds(), r.pubOutage2.Seconds(), r.applyOutage2.Seconds())
	t.Logf("publishes: %d acknowledged, %d failed and retried with the same id, %d answered Duplicate; consumer: %d applied, %d redeliveries, %d duplicates absorbed by the inbox, %d retried, %d dead-lettered; doubled %d, lost %d",
		r.acked, r.pubFailed, r.pubDuplicate, r.applied, r.redelivered, r.duplicates, r.retried, r.deadLettered, r.doubled, r.lost)
	if r.doubled != 0 || r.lost != 0 || r.deadLettered != 0 || r.applied != n {
		t.Errorf("doubled %d, lost %d, dead-lettered %d, applied %d; want 0, 0, 0, %d", r.doubled, r.lost, r.deadLettered, r.applied, n)
	}
}

func orderID(i int) string { return fmt.Sprintf("order-%06d", i) }

// failoverLog records what the publishers were told and what the
// consumers settled.
type failoverLog struct {
	mu           sync.Mutex
	acked        map[string]uint64 // id -> the PubAck's stream sequence
	ackTimes     []time.Time
	pubFailed    int
	pubDuplicate int
	delivered    map[uint64]string // stream sequence -> key, every delivery
	applied      map[string]int    // Applied outcomes per key
	settleTimes  []time.Time       // Applied and Duplicate outcomes
	duplicates   int
	redelivered  int
	retried      int
	deadLettered int
}

func newFailoverLog() *failoverLog {
	return &failoverLog{acked: map[string]uint64{}, delivered: map[uint64]string{}, applied: map[string]int{}}
}

// publish sends message i until it is acknowledged, always with the same
// id: an error leaves the outcome unknown, and the stream's duplicate
// window drops the copy if an earlier attempt was stored.
func (l *failoverLog) publish(ctx context.Context, pub *idemnats.Publisher, i int, patience time.Duration) error {
	id := orderID(i)
	msg := &nats.Msg{Subject: "orders.created", Data: []byte(id)}
	for deadline := time.Now().Add(patience); ; {
		r, err := pub.Publish(ctx, msg, id)
		if err == nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.acked[id] = r.Sequence
			l.ackTimes = append(l.ackTimes, time.Now())
			if r.Duplicate {
				l.pubDuplicate++
			}
			return nil
		}
		l.mu.Lock()
		l.pubFailed++
		l.mu.Unlock()
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("publish %s not acknowledged within %v: %w", id, patience, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *failoverLog) observe(ev idemnats.Event) {
	now := time.Now()
	meta, _ := ev.Msg.Metadata() // nil only for ReasonNoMetadata, which would fail the test anyway
	l.mu.Lock()
	defer l.mu.Unlock()
	if meta != nil {
		l.delivered[meta.Sequence.Stream] = ev.Key
		if meta.NumDelivered > 1 {
			l.redelivered++
		}
	}
	switch ev.Outcome {
	case idem.Applied:
		l.applied[ev.Key]++
		l.settleTimes = append(l.settleTimes, now)
	case idem.Duplicate:
		l.duplicates++
		l.settleTimes = append(l.settleTimes, now)
	case idem.Retried:
		l.retried++
	case idem.DeadLettered:
		l.deadLettered++
	}
}

func (l *failoverLog) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *failoverLog) appliedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.applied)
}

type failoverReport struct {
	acked, pubFailed, pubDuplicate                     int
	applied, duplicates, redelivered, retried          int
	deadLettered, doubled, lost                        int
	pubOutage1, applyOutage1, pubOutage2, applyOutage2 time.Duration
}

// report counts doubled keys (applied more than once by the Consumer) and
// lost publishes (acknowledged, but the sequence of the PubAck was never
// delivered with its id), and measures the outages: the longest time
// without a publish acknowledged, or a message settled, after each kill
// (until the next kill, or the last such event: the load runs throughout).
func (l *failoverLog) report(t testing.TB, n int, kill1, kill2 time.Time) failoverReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := failoverReport{
		acked: len(l.acked), pubFailed: l.pubFailed, pubDuplicate: l.pubDuplicate,
		applied: len(l.applied), duplicates: l.duplicates, redelivered: l.redelivered,
		retried: l.retried, deadLettered: l.deadLettered,
		pubOutage1:   longestGap(l.ackTimes, kill1, kill2),
		applyOutage1: longestGap(l.settleTimes, kill1, kill2),
		pubOutage2:   longestGap(l.ackTimes, kill2, slices.MaxFunc(l.ackTimes, time.Time.Compare)),
		applyOutage2: longestGap(l.settleTimes, kill2, slices.MaxFunc(l.settleTimes, time.Time.Compare)),
	}
	for k, c := range l.applied {
		if c > 1 {
			r.doubled++
			t.Errorf("%s applied %d times by the Consumer", k, c)
		}
	}
	for id, seq := range l.acked {
		if got, ok := l.delivered[seq]; !ok || got != id {
			r.lost++
			t.Errorf("%s acknowledged at sequence %d, which was delivered as %q (delivered: %v)", id, seq, got, ok)
		}
	}
	if r.acked != n {
		t.Errorf("%d publishes acknowledged, want %d", r.acked, n)
	}
	return r
}

// longestGap is the longest time within [from, to] without an event of ts.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	prev := from
	for _, t := range ts {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return max(gap, to.Sub(prev))
}
