package idemnats_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/adapters/internal/consume/settest"
	"github.com/idem-go/idem/internal/testsupport/natsenv"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	for name, opt := range map[string]idemnats.Option{
		"batch 0":           idemnats.WithBatchSize(0),
		"max attempts 0":    idemnats.WithMaxAttempts(0),
		"retry range":       idemnats.WithBackoff(time.Second, time.Millisecond),
		"nil key":           idemnats.WithKey(nil),
		"dead letter":       idemnats.WithDeadLetter(js, ""),
		"max wait too tiny": idemnats.WithMaxWait(time.Millisecond),
		"nil set handler":   idemnats.WithSetHandler(nil),
		"nil option":        nil,
	} {
		if _, err := idemnats.NewConsumer(cons, e.In, e.apply, opt); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := idemnats.NewConsumer(cons, e.In, nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("no handler: %v", err)
	}
	// A publisher option given to a consumer, or the other way round, no
	// longer compiles: the two have their own option types.
	for name, opt := range map[string]idemnats.PublisherOption{
		"negative retries": idemnats.WithPublishRetries(-1, time.Millisecond),
		"zero timeout":     idemnats.WithPublishTimeout(0),
		"nil option":       nil,
	} {
		if _, err := idemnats.NewPublisher(js, opt); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("publisher %s: err = %v, want ErrInvalidOption", name, err)
		}
	}
}

// The consumer dies after the inbox commit and before the ack. The restarted
// consumer gets the redeliveries, finds their keys, acks them as duplicates,
// and the effects stay applied once.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	s, js, cons, e := newEnv(t)
	ids := publishAll(t, js, 5)
	committed := crash(t, s, e, e.apply, idemnats.WithBatchSize(len(ids)))
	// The first group committed (the fetch may have held only part of the
	// batch when it started); the rest were delivered and never processed.
	if info := consumerInfo(t, js); info.NumAckPending != len(ids) {
		t.Fatalf("after the crash: num_ack_pending = %d, want %d (nothing acked)", info.NumAckPending, len(ids))
	}
	recoverAll(t, cons, e, e.apply, committed, len(ids)-committed, idemnats.WithDoubleAck())
	consumetest.WantOnce(t, e.Counts(t), nil, ids)
	wantAllAcked(t, js)
}

// A message whose handler keeps failing is nak'd and redelivered, then
// dead-lettered with headers at the delivery limit; a permanent error and a
// message without a key are dead-lettered at once. Good messages go through.
func TestPoisonDeadLettered(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	var mu sync.Mutex
	deliveries := map[string]uint64{} // highest NumDelivered the handler saw
	handler := e.applyAfter(func(m jetstream.Msg) error {
		id := msgID(m)
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		mu.Lock()
		deliveries[id] = max(deliveries[id], md.NumDelivered)
		mu.Unlock()
		return consumetest.PoisonOrMalformed(id)
	})
	var ev events
	publish(t, js, "orders.created", "good-1", "1")
	publish(t, js, "orders.created", "poison", "x")
	publish(t, js, "orders.created", "malformed", "y")
	publish(t, js, "orders.created", "", "no id")
	publish(t, js, "orders.created", "good-2", "2")
	r := startDLQ(t, js, cons, e, handler, 3, &ev)
	waitFor(t, 20*time.Second, "three dead letters", func() bool { return ev.Count(idem.DeadLettered) == 3 })
	waitFor(t, 5*time.Second, "acks", func() bool { return consumerInfo(t, js).NumAckPending == 0 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	mu.Lock()
	if deliveries["poison"] != 3 || deliveries["malformed"] != 1 {
		t.Errorf("deliveries: poison %d (want 3), malformed %d (want 1)", deliveries["poison"], deliveries["malformed"])
	}
	if got := ev.Count(idem.Retried); got != 2 {
		t.Errorf("%d retries, want 2 (poison's first two deliveries)", got)
	}
	mu.Unlock()
	if got := e.Counts(t); got["good-1"] != 1 || got["good-2"] != 1 || len(got) != 2 {
		t.Errorf("effects %v, want good-1 and good-2 once", got)
	}

	dlq, err := js.OrderedConsumer(context.Background(), "DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	byReason := map[idem.Reason]jetstream.Msg{}
	for range 3 {
		m, err := dlq.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		byReason[idem.Reason(m.Headers().Get(idemnats.HeaderReason))] = m
	}
	want := map[idem.Reason]struct{ data, delivered, errText, orig string }{
		idem.ReasonMaxAttempts: {"x", "3", "cannot parse amount", "poison"},
		idem.ReasonPermanent:   {"y", "1", "schema v9 unknown", "malformed"},
		idem.ReasonMissingKey:  {"no id", "1", "no Nats-Msg-Id header", ""},
	}
	for reason, w := range want {
		m := byReason[reason]
		if m == nil {
			t.Errorf("no dead letter with reason %s (got %v)", reason, keys(byReason))
			continue
		}
		h := m.Headers()
		if string(m.Data()) != w.data || h.Get(idemnats.HeaderNumDelivered) != w.delivered ||
			!strings.Contains(h.Get(idemnats.HeaderError), w.errText) || h.Get(idemnats.HeaderOriginalID) != w.orig ||
			h.Get(idemnats.HeaderStream) != "ORDERS" || h.Get(idemnats.HeaderSubject) != "orders.created" || h.Get(idemnats.HeaderStreamSeq) == "" {
			t.Errorf("%s: data %q headers %v", reason, m.Data(), h)
		}
	}
}

func keys[K comparable, V any](m map[K]V) []K {
	var out []K
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The server goes away in the middle of a batch and comes back on the same
// port and store. The consume loop survives the outage, every message is
// applied once, and all are acked in the end.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := natsenv.Run(t, dir, -1)
	port := natsenv.Port(s)
	_, js := natsenv.Connect(t, s.ClientURL(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	cons := setup(t, js)
	e := newEffects(t)
	const n = 20
	publishAll(t, js, n)
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	handler := e.applyAfter(func(m jetstream.Msg) error {
		if msgID(m) == "order-6" {
			once.Do(func() { close(blocked); <-release })
		}
		return nil
	})
	c, err := idemnats.NewConsumer(cons, e.In, handler, idemnats.WithBatchSize(4), idemnats.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never reached order-6")
	}
	s.Shutdown()
	s.WaitForShutdown()
	close(release) // commits while the server is away; the acks cannot reach it
	time.Sleep(300 * time.Millisecond)
	natsenv.Run(t, dir, port)

	waitFor(t, 30*time.Second, "all messages applied and acked", func() bool {
		if len(e.Counts(t)) != n {
			return false
		}
		info := consumerInfo(t, js)
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	for k, c := range e.Counts(t) {
		if c != 1 {
			t.Errorf("%s applied %d times", k, c)
		}
	}
}

// With the connection closed for good, Run returns ErrClosed instead of
// spinning.
func TestRunReturnsWhenClosed(t *testing.T) {
	t.Parallel()
	s, _, _, e := newEnv(t)
	nc, js := natsenv.Connect(t, s.ClientURL())
	cons, err := js.Consumer(context.Background(), "ORDERS", "worker")
	if err != nil {
		t.Fatal(err)
	}
	c, err := idemnats.NewConsumer(cons, e.In, e.apply, idemnats.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	waitPulling(t, js)
	nc.Close()
	select {
	case err := <-r.Done:
		if !errors.Is(err, idem.ErrClosed) {
			t.Fatalf("Run = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		r.Cancel()
		t.Fatal("Run did not return after the connection closed")
	}
	r.Cancel()
}

// With the consumer deleted on the server, Run returns an error that says
// so instead of waiting for messages that will never come.
func TestRunReturnsWhenConsumerDeleted(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	c, err := idemnats.NewConsumer(cons, e.In, e.apply, idemnats.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	waitPulling(t, js)
	if err := js.DeleteConsumer(context.Background(), "ORDERS", "worker"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.Done:
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, idem.ErrClosed) || !strings.Contains(err.Error(), "pull stopped") {
			t.Fatalf("Run = %v, want the pull stopped", err)
		}
		if !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("Run = %v, want it to wrap ErrConsumerDeleted or ErrConsumerNotFound", err)
		}
	case <-time.After(20 * time.Second):
		r.Cancel()
		t.Fatal("Run did not return after the consumer was deleted")
	}
	r.Cancel()
}

// waitPulling waits until consumer worker has a pull request waiting on
// the server: Run has started.
func waitPulling(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	waitFor(t, 10*time.Second, "a pull request waiting", func() bool { return consumerInfo(t, js).NumWaiting > 0 })
}

// With a set handler and no per-message handler: the consumer dies after
// the commit and before the acks; the restarted consumer gets the
// redeliveries and acks them as duplicates without calling the set handler
// again. Every message reaches the set handler once and is applied once.
func TestSetHandlerAppliesOnce(t *testing.T) {
	t.Parallel()
	s, js, cons, e := newEnv(t)
	set := newSetRecorder(e)
	ids := publishAll(t, js, 30)
	// A producer retry inside the duplicate window: dropped by the stream.
	publish(t, js, "orders.created", "order-0", "0")
	committed := crash(t, s, e, nil, idemnats.WithSetHandler(set.handle), idemnats.WithBatchSize(10))
	recoverAll(t, cons, e, nil, committed, len(ids)-committed, idemnats.WithSetHandler(set.handle))
	seen, calls := set.Snapshot()
	consumetest.WantOnce(t, e.Counts(t), seen, ids)
	if calls >= len(ids) {
		t.Errorf("set handler called %d times for %d messages: not batched", calls, len(ids))
	}
	wantAllAcked(t, js)
}

// A group holding a poison message makes the set handler fail; the group is
// run again message by message with the Handler, which isolates the poison
// message: it is nak'd, redelivered and dead-lettered at the delivery
// limit, while the others commit once and are acked.
func TestSetHandlerPoisonFallback(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	set := newSetRecorder(e)
	poison := consumetest.NewPoison(msgID)
	set.Fail = poison.Fail
	each := poison.Handler(e.apply)
	for _, id := range consumetest.PoisonIDs {
		publish(t, js, "orders.created", id, id)
	}
	var ev events
	r := startDLQ(t, js, cons, e, each, 3, &ev, idemnats.WithSetHandler(set.handle))
	waitFor(t, 20*time.Second, "the dead letter", func() bool { return ev.Count(idem.DeadLettered) == 1 })
	waitFor(t, 5*time.Second, "acks", func() bool { return consumerInfo(t, js).NumAckPending == 0 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	poison.Check(t, e.Effects, &ev, 3)
	dlq, err := js.OrderedConsumer(context.Background(), "DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlq.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if h := m.Headers(); string(m.Data()) != "poison" || h.Get(idemnats.HeaderReason) != string(idem.ReasonMaxAttempts) || h.Get(idemnats.HeaderNumDelivered) != "3" {
		t.Errorf("dead letter %q, headers %v", m.Data(), h)
	}
}

// A set handler without a per-message handler that fails fails the whole
// group: nothing is applied or acked, every message is nak'd and
// redelivered, and none is dead-lettered for it, even past the delivery
// limit. Once the handler works, each message is applied once.
func TestSetHandlerNoFallback(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	set := newSetRecorder(e)
	broken := consumetest.NewBroken[jetstream.Msg]()
	set.Fail = broken.Fail
	ids := publishAll(t, js, 6)
	var ev events
	r := startDLQ(t, js, cons, e, nil, 2, &ev, idemnats.WithSetHandler(set.handle))
	waitFor(t, 20*time.Second, "three rounds of redeliveries", func() bool { return ev.Count(idem.Retried) >= 3*len(ids) })
	info := consumerInfo(t, js)
	if info.AckFloor.Consumer != 0 {
		t.Fatalf("while the set handler fails: ack floor %d, want 0", info.AckFloor.Consumer)
	}
	consumetest.WantNothingApplied(t, e.Effects, &ev, nil)

	broken.Fix()
	waitFor(t, 20*time.Second, "all applied", func() bool { return ev.Count(idem.Applied) == len(ids) })
	waitFor(t, 5*time.Second, "acks", func() bool { return consumerInfo(t, js).NumAckPending == 0 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	consumetest.WantAllAppliedOnce(t, e.Effects, &ev, ids)
}

func TestMain(m *testing.M) { consumetest.Main(m) }

// newEnv starts an embedded server with the streams of setup, connects to
// it, and opens an inbox.
func newEnv(t testing.TB) (*server.Server, jetstream.JetStream, jetstream.Consumer, *effects) {
	t.Helper()
	s := natsenv.Run(t, t.TempDir(), -1)
	_, js := natsenv.Connect(t, s.ClientURL())
	return s, js, setup(t, js), newEffects(t)
}

// setup creates stream ORDERS (orders.>) and DLQ (dlq.>) and a durable pull
// consumer "worker" with a short AckWait.
func setup(t testing.TB, js jetstream.JetStream) jetstream.Consumer {
	t.Helper()
	ctx := context.Background()
	for name, subj := range map[string]string{"ORDERS": "orders.>", "DLQ": "dlq.>"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// effects is the shared SQLite inbox with an effects table.
type effects struct{ *consumetest.Effects }

func newEffects(t testing.TB) *effects { return &effects{consumetest.NewEffects(t)} }

// msgID is a message's Nats-Msg-Id, the key of every test message.
func msgID(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }

func msgData(m jetstream.Msg) string { return string(m.Data()) }

// apply is a handler recording the message's effect.
func (e *effects) apply(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
	return e.Apply(ctx, tx, msgID(m), msgData(m))
}

func publish(t testing.TB, js jetstream.JetStream, subject, id, data string) {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Data: []byte(data), Header: nats.Header{}}
	if id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// setRecorder is a set handler writing all its messages' effects with one
// multi-row INSERT, and counting how often each key reached it.
type setRecorder struct {
	*settest.Recorder[jetstream.Msg]
	handle func(context.Context, *sql.Tx, []jetstream.Msg) error
}

func newSetRecorder(*effects) *setRecorder {
	id := func(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }
	r := settest.New(id)
	return &setRecorder{r, r.Handler("INSERT INTO effects (key, data)", func(m jetstream.Msg) []any { return []any{id(m), string(m.Data())} })}
}

// applyAfter is a handler that applies a message's effect once before(m)
// returns nil, and fails with its error otherwise.
func (e *effects) applyAfter(before func(jetstream.Msg) error) idemnats.Handler {
	return consumetest.ApplyAfter(e.apply, before)
}

// startDLQ starts a Consumer that dead-letters to dlq.orders at the given
// attempt, with short retry delays, reporting to ev.
func startDLQ(t testing.TB, js jetstream.JetStream, cons jetstream.Consumer, e *effects, h idemnats.Handler, attempts int, ev *events, opts ...idemnats.Option) *consumetest.Runner {
	t.Helper()
	c, err := idemnats.NewConsumer(cons, e.In, h, append([]idemnats.Option{idemnats.WithMaxAttempts(attempts),
		idemnats.WithBackoff(10*time.Millisecond, 40*time.Millisecond), idemnats.WithDeadLetter(js, "dlq.orders"),
		idemnats.WithObserver(ev.Observe), idemnats.WithMaxWait(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return start(c)
}

func start(c *idemnats.Consumer) *consumetest.Runner { return consumetest.Start(c.Run) }

var waitFor = testenv.WaitFor

// publishAll publishes n messages order-<i> with data <i> and returns their
// ids.
func publishAll(t testing.TB, js jetstream.JetStream, n int) []string {
	t.Helper()
	ids := consumetest.Keys(n)
	for i, id := range ids {
		publish(t, js, "orders.created", id, fmt.Sprint(i))
	}
	return ids
}

// crash runs a Consumer on its own connection and closes that connection
// right after the first commit, before any ack; it returns how many keys
// committed.
func crash(t testing.TB, s *server.Server, e *effects, h idemnats.Handler, opts ...idemnats.Option) int {
	t.Helper()
	nc, js := natsenv.Connect(t, s.ClientURL())
	cons, err := js.Consumer(context.Background(), "ORDERS", "worker")
	if err != nil {
		t.Fatal(err)
	}
	c, err := idemnats.NewConsumer(cons, e.In, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	idemnats.SetAfterCommit(c, nc.Close) // the crash: committed, never acked
	return consumetest.Crashed(t, e.Effects, c.Run)
}

// recoverAll runs a new Consumer until dups redeliveries are acked as
// duplicates and applied others are applied.
func recoverAll(t testing.TB, cons jetstream.Consumer, e *effects, h idemnats.Handler, dups, applied int, opts ...idemnats.Option) {
	t.Helper()
	var ev events
	c, err := idemnats.NewConsumer(cons, e.In, h, append(opts, idemnats.WithObserver(ev.Observe))...)
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunUntil(t, c.Run, 20*time.Second, "redeliveries acked", func() bool {
		return ev.Count(idem.Duplicate) == dups && ev.Count(idem.Applied) == applied
	})
}

// wantAllAcked checks that the consumer has nothing pending or unacked.
func wantAllAcked(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	if info := consumerInfo(t, js); info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("num_ack_pending %d, num_pending %d; want 0, 0", info.NumAckPending, info.NumPending)
	}
}

func consumerInfo(t testing.TB, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(context.Background(), "ORDERS", "worker")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// events collects a Consumer's settled messages.
type events = consumetest.Events[jetstream.Msg]
