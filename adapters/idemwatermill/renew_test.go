package idemwatermill_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem/adapters/idemwatermill"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
)

// A handler that outlives its lease keeps its key: the Middleware renews
// the lease (keystore.Do's KeepAlive, from a timer), the handler's context
// carries Do's claim and stays live, and a redelivery meanwhile finds the
// key in progress instead of running the handler again.
func TestLongHandlerKeepsItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := dbtest.MemStore(t)
		m, err := idemwatermill.NewMiddleware(s)
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		h := m.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			if _, ok := keystore.ClaimFrom(msg.Context()); !ok {
				t.Error("the handler's context carries no claim")
			}
			time.Sleep(3 * keystore.DefaultLease)
			if err := context.Cause(msg.Context()); err != nil {
				t.Errorf("the handler's context ended: %v", err)
			}
			return nil, nil
		})
		done := make(chan error, 1)
		go func() {
			_, err := h(message.NewMessage("evt-1", []byte("x")))
			done <- err
		}()
		time.Sleep(2 * keystore.DefaultLease)
		if _, err := h(message.NewMessage("evt-1", []byte("x"))); err == nil || runs.Load() != 1 {
			t.Fatalf("a redelivery while the first runs: err %v, runs %d; want in progress, 1 run", err, runs.Load())
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c, err := s.Reserve(context.Background(), "evt-1", nil, time.Minute)
		if err != nil || c.State != keystore.Done {
			t.Fatalf("after the handler: %v %v, want Done", c.State, err)
		}
	})
}
