package idemwatermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem/adapters/idemwatermill"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/adapters/internal/consume/spantest"
	"github.com/idem-go/idem/idemotel"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
)

func uuidOf(msg *message.Message) string { return msg.UUID }

// Under the Router and gochannel, with either middleware: each message's
// span links to the producer whose traceparent its metadata carries, the
// inbox transaction or the key store calls nest under it, the copy ends
// duplicate, the handler error retried (nacked, redelivered), and no span
// holds a key.
func TestTrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		under string
		mw    func(t *testing.T, rec *spantest.Recorder) message.HandlerMiddleware
	}{
		{"keystore", "idem.keystore.", func(t *testing.T, rec *spantest.Recorder) message.HandlerMiddleware {
			m, err := idemwatermill.NewMiddleware(idemotel.WrapStore(dbtest.MemStore(t), rec.Tracer), idemwatermill.WithTracer(rec.Tracer))
			if err != nil {
				t.Fatal(err)
			}
			return m.Middleware
		}},
		{"inbox", "idem.inbox.", func(t *testing.T, rec *spantest.Recorder) message.HandlerMiddleware {
			in := consumetest.NewEffects(t).Traced(t, rec.Tracer)
			m, err := idemwatermill.NewInboxMiddleware(in, idemwatermill.WithTracer(rec.Tracer))
			if err != nil {
				t.Fatal(err)
			}
			return m.Middleware
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := spantest.New(t)
			producer, tp := rec.Producer("orders publish")
			eff := &effectCounter{}
			fail := consumetest.FailFirst(uuidOf, 1)
			h := func(msg *message.Message) error {
				if err := fail(msg); err != nil {
					return err
				}
				return eff.apply(msg)
			}
			runRouter(t, tc.mw(t, rec), h, func(pub message.Publisher) {
				for _, id := range consumetest.TracedKeys {
					msg := message.NewMessage(id, []byte(id))
					msg.Metadata.Set("traceparent", tp)
					if err := pub.Publish("orders", msg); err != nil { // blocks until acked
						t.Fatal(err)
					}
				}
			})
			rec.Check(t, spantest.Want{Producer: producer, Applied: consumetest.TracedKey, Failing: consumetest.FailingKey,
				Under: tc.under, UnderMessage: true, Unbatched: true, System: "watermill"})
		})
	}
}
