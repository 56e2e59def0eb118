package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/outbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A retry with the same id is stored once; the stream answers Duplicate
// with the original sequence.
func TestPublishDuplicate(t *testing.T) {
	t.Parallel()
	_, js, _, _ := newEnv(t)
	p, err := idemnats.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	send := func(id, data string) idemnats.PubResult {
		t.Helper()
		r, err := p.Publish(ctx, &nats.Msg{Subject: "orders.created", Data: []byte(data)}, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := send("order-1", "a")
	other := send("order-2", "b")
	retry := send("order-1", "a (retried)")
	if first.Duplicate || other.Duplicate || !retry.Duplicate {
		t.Fatalf("duplicate flags %v %v %v, want false false true", first.Duplicate, other.Duplicate, retry.Duplicate)
	}
	if retry.Sequence != first.Sequence || retry.Stream != "ORDERS" {
		t.Fatalf("retry answered %+v, want the original sequence %d", retry, first.Sequence)
	}
	st, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
	if _, err := p.Publish(ctx, &nats.Msg{Subject: "orders.created"}, ""); err == nil {
		t.Fatal("empty id accepted")
	}
}

// lostAck stores the first publish and then reports a timeout, as when the
// PubAck is lost on the way back.
type lostAck struct {
	jetstream.JetStream
	calls int
}

func (l *lostAck) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	l.calls++
	ack, err := l.JetStream.PublishMsg(ctx, m, opts...)
	if l.calls == 1 && err == nil {
		return nil, nats.ErrTimeout
	}
	return ack, err
}

func TestPublishRetryAfterLostAck(t *testing.T) {
	t.Parallel()
	_, js, _, _ := newEnv(t)
	flaky := &lostAck{JetStream: js}
	p, err := idemnats.NewPublisher(flaky, idemnats.WithPublishRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Publish(context.Background(), &nats.Msg{Subject: "orders.created", Data: []byte("x")}, "order-9")
	if err != nil {
		t.Fatal(err)
	}
	if flaky.calls != 2 || !r.Duplicate || r.Sequence != 1 {
		t.Fatalf("calls %d, result %+v; want a retry answered as duplicate of sequence 1", flaky.calls, r)
	}

	none, err := idemnats.NewPublisher(&lostAck{JetStream: js}, idemnats.WithPublishRetries(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.Publish(context.Background(), &nats.Msg{Subject: "orders.created"}, "order-10"); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("without retries: err = %v, want the timeout", err)
	}
}

// hangingAck never answers: every attempt runs into its timeout.
type hangingAck struct {
	jetstream.JetStream
	calls int
}

func (h *hangingAck) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	h.calls++
	<-ctx.Done()
	return nil, ctx.Err()
}

// WithPublishTimeout bounds each attempt, not the call: two attempts of
// 50ms each end well before the caller's own deadline.
func TestPublishTimeoutPerAttempt(t *testing.T) {
	t.Parallel()
	hang := &hangingAck{}
	p, err := idemnats.NewPublisher(hang, idemnats.WithPublishTimeout(50*time.Millisecond), idemnats.WithPublishRetries(1, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = p.Publish(ctx, &nats.Msg{Subject: "orders.created"}, "order-11")
	if !errors.Is(err, context.DeadlineExceeded) || hang.calls != 2 {
		t.Fatalf("err = %v after %d attempts; want DeadlineExceeded after 2", err, hang.calls)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Publish took %v: the attempt timeout was not applied", d)
	}
}

// A relay that dies after publishing in every other round republishes its
// batches; the stream's duplicate window keeps one copy of each message.
func TestOutboxPublisher(t *testing.T) {
	_, js, _, _ := newEnv(t)
	ctx := context.Background()
	p, err := idemnats.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("evt-", i), Topic: "orders.created", OrderingKey: fmt.Sprint("order-", i%3), Payload: []byte("{}")})
	}
	published := consumetest.Relay(t, msgs, 7, p.OutboxPublisher(), func(round int) bool { return round%2 == 1 })
	info, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != 20 || published <= 20 {
		t.Fatalf("stream holds %d messages after %d publications; want 20 and more than 20", got, published)
	}
}
