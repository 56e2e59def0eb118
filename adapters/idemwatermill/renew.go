package idemwatermill

import (
	"context"
	"errors"
	"fmt"

	"github.com/idem-go/idem/internal/handlerctx"
	"github.com/idem-go/idem/keystore"
)

// Lease renewal without a goroutine per message.
//
// keystore.Do renews the lease of a store that can (keystore.KeepAlive)
// from a goroutine it starts with every effect; most handlers return long
// before the first renewal is due. When the store renews leases and Do
// runs with its default lease (no WithKeystoreOptions), the Middleware
// gives Do a view of the store that does not renew (noRenew), so that Do
// starts nothing, and renews around the handler itself, by the same rules,
// from a timer armed for the first renewal (internal/handlerctx). The
// handler's context is still Do's effect context (keystore.ClaimFrom reads
// the claim from it), and is cancelled, with a cause wrapping
// keystore.ErrLeaseLost, if the lease is lost.

// noRenew is a store without Extend: keystore.Do does not start its
// renewals over it. It forwards Notify, so that waits still wake at once.
type noRenew struct{ keystore.Store }

// Unwrap lets keystore.As see the store's other optional interfaces.
func (s noRenew) Unwrap() keystore.Store { return s.Store }

// Notify forwards to the store's keystore.Notifier.
func (s noRenew) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return keystore.Notify(ctx, s.Store, key)
}

// renewing wraps effect, run by keystore.Do over noRenew{m.renew}, with
// the renewal of its claim's lease (keystore.DefaultLease, Do's default).
func (m *Middleware) renewing(key string, effect func(context.Context) ([]byte, error)) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		claim, ok := keystore.ClaimFrom(ctx)
		if !ok {
			return nil, errors.New("idemwatermill: keystore.Do ran the effect without a claim")
		}
		// ClientCancel keeps Do's context: the effect still ends with it.
		hctx, run := handlerctx.Start(ctx, m.renew, key, claim, keystore.DefaultLease, handlerctx.Config{ClientCancel: true})
		defer run.Stop() // a panic: stop renewing before Do releases the key
		res, err := effect(hctx)
		if _, lost := run.Stop(); lost != nil && err != nil && !errors.Is(err, keystore.ErrLeaseLost) {
			// The effect most likely gave up because its context was
			// cancelled: say why, as keystore.Do does.
			err = fmt.Errorf("%w (the effect's context was cancelled: %w)", err, lost)
		}
		return res, err
	}
}
