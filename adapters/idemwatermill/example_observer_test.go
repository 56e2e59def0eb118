package idemwatermill_test

import (
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemwatermill"
	"github.com/idem-go/idem/keystore/memstore"
)

// The observer sees what became of each message, in the outcomes and
// reasons every idem adapter shares. A message without a key, or one the
// handler marks idem.Permanent, fails with an error that is itself marked
// idem.Permanent, for Watermill's PoisonQueueWithFilter(idem.IsPermanent).
func ExampleWithObserver() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	dedup, err := idemwatermill.NewMiddleware(store, idemwatermill.WithKeyMetadata("order_id"),
		idemwatermill.WithObserver(func(e idemwatermill.Event) {
			fmt.Println(strings.TrimSpace(fmt.Sprintf("order %q: %s %s", e.Key, e.Outcome, e.Reason)))
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := dedup.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if string(msg.Payload) == "garbage" {
			return nil, idem.Permanent(errors.New("cannot parse"))
		}
		return nil, nil
	})
	for _, m := range []struct{ order, payload string }{{"7", "ok"}, {"7", "ok"}, {"", "ok"}, {"8", "garbage"}} {
		msg := message.NewMessage("uuid-"+m.order, []byte(m.payload))
		if m.order != "" {
			msg.Metadata.Set("order_id", m.order)
		}
		if _, err := h(msg); err != nil {
			fmt.Println("  poison queue:", idem.IsPermanent(err))
		}
	}
	// Output:
	// order "7": applied
	// order "7": duplicate
	// order "": dead-lettered missing-key
	//   poison queue: true
	// order "8": dead-lettered permanent
	//   poison queue: true
}
