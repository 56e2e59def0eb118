package idemwatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"go.uber.org/goleak"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemwatermill"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
)

func TestMain(m *testing.M) {
	// Watermill's map repository starts a cleanup goroutine that nothing
	// stops (one of the habits idem does not copy); ignore only that one.
	consumetest.Main(m, goleak.IgnoreTopFunction(
		"github.com/ThreeDotsLabs/watermill/message/router/middleware.(*mapExpiringKeyRepository).cleanOutLoop"))
}

// effectCounter is the business effect: an in-memory counter, or (for the
// inbox) a row written through the inbox transaction.
type effectCounter struct {
	n  atomic.Int32
	db *sql.DB
}

func (e *effectCounter) apply(msg *message.Message) error {
	if tx, ok := idemwatermill.Tx(msg.Context()); ok {
		return (&consumetest.Effects{}).Apply(msg.Context(), tx, msg.UUID, "")
	}
	e.n.Add(1)
	return nil
}

func (e *effectCounter) count(t *testing.T) int {
	t.Helper()
	if e.db == nil {
		return int(e.n.Load())
	}
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// newMiddleware is a Middleware over a fresh memstore.
func newMiddleware(t *testing.T, opts ...idemwatermill.Option) *idemwatermill.Middleware {
	t.Helper()
	m, err := idemwatermill.NewMiddleware(dbtest.MemStore(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type variant struct {
	name string
	// mw builds the middleware under test; eff is prepared for it.
	mw func(t *testing.T, eff *effectCounter) message.HandlerMiddleware
	// want is the number of times the effect is applied in the
	// fail-once-then-redeliver scenario.
	want int
}

func newInbox(t *testing.T, eff *effectCounter) *inbox.Inbox {
	t.Helper()
	e := consumetest.NewEffects(t)
	eff.db = e.DB
	return e.In
}

var variants = []variant{
	{
		name: "watermill-deduplicator",
		mw: func(t *testing.T, _ *effectCounter) message.HandlerMiddleware {
			repo, err := middleware.NewMapExpiringKeyRepository(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			d := &middleware.Deduplicator{
				KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil },
				Repository: repo,
			}
			return d.Middleware
		},
		want: 0, // the key is kept when the handler fails: the redelivery is dropped
	},
	{
		name: "idem-keystore",
		mw: func(t *testing.T, _ *effectCounter) message.HandlerMiddleware {
			return newMiddleware(t).Middleware
		},
		want: 1,
	},
	{
		name: "idem-inbox",
		mw: func(t *testing.T, eff *effectCounter) message.HandlerMiddleware {
			m, err := idemwatermill.NewInboxMiddleware(newInbox(t, eff))
			if err != nil {
				t.Fatal(err)
			}
			return m.Middleware
		},
		want: 1,
	},
}

// TestFailedMessageRedelivered runs a handler that fails on its first
// delivery under Watermill's Router and the gochannel pubsub: the router
// nacks, gochannel redelivers. Watermill's Deduplicator drops the redelivery
// (effect lost); idem's middlewares apply it once.
func TestFailedMessageRedelivered(t *testing.T) {
	t.Parallel()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			eff := &effectCounter{}
			mw := v.mw(t, eff)
			var calls atomic.Int32
			h := func(msg *message.Message) error {
				if calls.Add(1) == 1 {
					return errors.New("transient failure")
				}
				return eff.apply(msg)
			}
			runRouter(t, mw, h, func(pub message.Publisher) {
				msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))
				if err := pub.Publish("orders", msg); err != nil { // blocks until acked
					t.Fatal(err)
				}
			})
			if got := eff.count(t); got != v.want {
				t.Errorf("effect applied %d times, want %d (handler calls: %d)", got, v.want, calls.Load())
			}
		})
	}
}

// runRouter runs a Watermill router with one handler over gochannel, calls
// publish once the router runs, and closes everything before returning.
func runRouter(t *testing.T, mw message.HandlerMiddleware, h message.NoPublishHandlerFunc, publish func(message.Publisher)) {
	t.Helper()
	logger := watermill.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	defer pubsub.Close()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.AddConsumerHandler("orders-handler", "orders", pubsub, h).AddMiddleware(mw)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case <-time.After(10 * time.Second):
		t.Fatal("router did not start")
	}
	publish(pubsub)
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	if err := <-errc; err != nil {
		t.Error(err)
	}
}

// TestConcurrentDuplicates delivers one message 16 times at once; the
// effect is applied once and every delivery succeeds (is acked).
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	for _, v := range variants[1:] {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			eff := &effectCounter{}
			var mw message.HandlerMiddleware
			if v.name == "idem-keystore" {
				mw = newMiddleware(t, idemwatermill.WithKeystoreOptions(keystore.WithWait(time.Millisecond, 10*time.Millisecond))).Middleware
			} else {
				mw = v.mw(t, eff)
			}
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				time.Sleep(5 * time.Millisecond) // widen the race window
				return nil, eff.apply(msg)
			})
			id := watermill.NewUUID()
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for range 16 {
				wg.Go(func() {
					_, err := h(message.NewMessage(id, []byte("x")))
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("delivery failed: %v", err)
				}
			}
			if got := eff.count(t); got != 1 {
				t.Errorf("effect applied %d times, want 1", got)
			}
		})
	}
}

// TestReplayProducedMessages: a duplicate returns the produced messages
// stored with the key, so a crash between completion and publishing loses
// nothing.
func TestReplayProducedMessages(t *testing.T) {
	t.Parallel()
	m := newMiddleware(t, idemwatermill.WithKeyMetadata("order_id"))
	var runs int
	h := m.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		runs++
		out := message.NewMessage(watermill.NewUUID(), []byte("shipped"))
		out.Metadata.Set("order_id", msg.Metadata.Get("order_id"))
		return []*message.Message{out}, nil
	})
	in := func() *message.Message {
		msg := message.NewMessage(watermill.NewUUID(), []byte("order")) // a new UUID per delivery: the key is the metadata
		msg.Metadata.Set("order_id", "42")
		return msg
	}
	first, err := h(in())
	if err != nil {
		t.Fatal(err)
	}
	again, err := h(in())
	if err != nil {
		t.Fatal(err)
	}
	if runs != 1 || len(first) != 1 || len(again) != 1 || first[0].UUID != again[0].UUID ||
		string(again[0].Payload) != "shipped" || again[0].Metadata.Get("order_id") != "42" {
		t.Fatalf("runs %d, first %v, replay %v", runs, first, again)
	}
	missing := message.NewMessage(watermill.NewUUID(), nil)
	if _, err := h(missing); !errors.Is(err, idem.ErrMissingKey) {
		t.Fatalf("missing metadata: %v, want ErrMissingKey", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	s := dbtest.MemStore(t)
	for _, o := range []idemwatermill.Option{
		idemwatermill.WithKeyMetadata(""), idemwatermill.WithKey(nil), idemwatermill.WithFingerprint(nil), nil,
	} {
		if _, err := idemwatermill.NewMiddleware(s, o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Error("invalid option accepted")
		}
	}
	if _, err := idemwatermill.NewMiddleware(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Error("nil store accepted")
	}
}
