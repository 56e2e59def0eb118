package idemwatermill_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemwatermill"
)

// Both middlewares follow the rules every adapter shares: the outcome of
// each message reaches the observer, and a message that can never succeed
// fails with an error marked idem.Permanent naming its reason, while a
// transient failure does not.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	build := map[string]func(*testing.T, *effectCounter, ...idemwatermill.Option) message.HandlerMiddleware{
		"keystore": func(t *testing.T, _ *effectCounter, opts ...idemwatermill.Option) message.HandlerMiddleware {
			return newMiddleware(t, opts...).Middleware
		},
		"inbox": func(t *testing.T, eff *effectCounter, opts ...idemwatermill.Option) message.HandlerMiddleware {
			m, err := idemwatermill.NewInboxMiddleware(newInbox(t, eff), opts...)
			if err != nil {
				t.Fatal(err)
			}
			return m.Middleware
		},
	}
	steps := []struct {
		id, fp, body string
		want         idem.Outcome
		reason       idem.Reason
	}{
		{"a", "v1", "", idem.Applied, ""},
		{"a", "v1", "", idem.Duplicate, ""},
		{"a", "v2", "", idem.DeadLettered, idem.ReasonFingerprintMismatch},
		{"", "", "", idem.DeadLettered, idem.ReasonMissingKey},
		{strings.Repeat("k", idem.MaxKeyLen+1), "", "", idem.DeadLettered, idem.ReasonInvalidKey},
		{"b", "", "fail", idem.Retried, ""},
		{"b", "", "", idem.Applied, ""},
		{"c", "", "poison", idem.DeadLettered, idem.ReasonPermanent},
	}
	for name, mw := range build {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got []idemwatermill.Event
			eff := &effectCounter{}
			h := mw(t, eff, idemwatermill.WithKeyMetadata("id"),
				idemwatermill.WithFingerprint(func(m *message.Message) []byte { return []byte(m.Metadata.Get("fp")) }),
				idemwatermill.WithObserver(func(e idemwatermill.Event) { got = append(got, e) }),
				idemwatermill.WithLogger(slog.New(slog.DiscardHandler)))(func(msg *message.Message) ([]*message.Message, error) {
				switch string(msg.Payload) {
				case "fail":
					return nil, errors.New("database busy")
				case "poison":
					return nil, idem.Permanent(errors.New("cannot parse"))
				}
				return nil, eff.apply(msg)
			})
			for i, s := range steps {
				msg := message.NewMessage(s.id+"-uuid", []byte(s.body))
				msg.Metadata.Set("id", s.id)
				msg.Metadata.Set("fp", s.fp)
				_, err := h(msg)
				if len(got) != i+1 {
					t.Fatalf("step %d: %d events", i, len(got))
				}
				e := got[i]
				if e.Outcome != s.want || e.Reason != s.reason || e.Msg != msg || (e.Outcome != idem.DeadLettered && e.Key != s.id) {
					t.Fatalf("step %d (%.8s): event %+v, want %v %q", i, s.id, e, s.want, s.reason)
				}
				switch {
				case s.want == idem.DeadLettered && (!idem.IsPermanent(err) || !strings.Contains(err.Error(), string(s.reason))):
					t.Fatalf("step %d: error %v, want permanent and naming %s", i, err, s.reason)
				case s.want == idem.Retried && (err == nil || idem.IsPermanent(err)):
					t.Fatalf("step %d: error %v, want a transient one", i, err)
				case (s.want == idem.Applied || s.want == idem.Duplicate) && err != nil:
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if n := eff.count(t); n != 2 {
				t.Fatalf("%d effects, want 2 (a and b once each)", n)
			}
		})
	}
}
