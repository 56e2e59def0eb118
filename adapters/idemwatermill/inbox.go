package idemwatermill

import (
	"context"
	"database/sql"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/inbox"
)

type txKey struct{}

// Tx returns the inbox transaction an InboxMiddleware runs the handler in,
// from msg.Context(). The handler must do its database work through it: the
// key commits in the same transaction.
func Tx(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}

// InboxMiddleware deduplicates a Watermill handler with a transactional
// inbox: the message's key and the handler's database effect commit in one
// transaction, which the handler reads with Tx(msg.Context()). A handler
// error rolls both back, so the nacked message's redelivery runs it again.
type InboxMiddleware struct {
	in  *inbox.Inbox
	cfg config
}

// NewInboxMiddleware returns an InboxMiddleware over in (whose consumer name
// scopes the keys). WithKeystoreOptions does not apply to it.
func NewInboxMiddleware(in *inbox.Inbox, opts ...Option) (*InboxMiddleware, error) {
	cfg, err := newConfig(in != nil, "inbox", opts)
	if err == nil && len(cfg.doOpts) > 0 {
		err = cfg.Invalid("WithKeystoreOptions applies to the keystore Middleware only")
	}
	if err != nil {
		return nil, err
	}
	return &InboxMiddleware{in: in, cfg: cfg}, nil
}

// Middleware is the message.HandlerMiddleware: router.AddMiddleware(m.Middleware).
//
// A new key runs h inside the inbox transaction (h may run more than once if
// the database asks for the transaction to be retried; only one run commits)
// and returns h's produced messages after the commit. A duplicate does not run
// h and returns no messages: the message is acknowledged. Messages that must
// not be lost should be written to an outbox table through the same
// transaction rather than returned, because returned messages are published
// after the commit, and a crash in between loses them.
//
// What happens if the process dies: before COMMIT, nothing is recorded and the
// redelivery runs h; during COMMIT, the error is returned (nack) and the
// redelivery finds out; after COMMIT, before the ack, the redelivery is a
// duplicate and is acknowledged.
func (m *InboxMiddleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		orig := msg.Context()
		defer msg.SetContext(orig)
		var produced []*message.Message
		err := m.cfg.handle(msg, func(ctx context.Context, d *consume.Delivery[*message.Message]) (bool, error) {
			return m.in.ProcessMessage(ctx, inbox.Message{Key: d.Key, Fingerprint: d.Fingerprint}, func(ctx context.Context, tx *sql.Tx) error {
				msg.SetContext(context.WithValue(ctx, txKey{}, tx))
				out, err := h(msg)
				produced = out
				return err
			})
		})
		if err != nil {
			return nil, err
		}
		return produced, nil
	}
}
