// Package keyclaim is how idemhttp and idemgrpc wait for a key another
// request holds in progress, and give a key back: one rule for both front
// ends.
package keyclaim

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idem-go/idem/keystore"
)

// Wait is the keystore.Await schedule of a front end configured with
// storeTimeout and wait (WithWait): each Reserve is bounded by storeTimeout;
// with wait > 0, a key in progress is polled from 10ms up to 250ms with
// jitter for up to wait, and with wait 0 it is not waited for.
func Wait(storeTimeout, wait time.Duration) keystore.Wait {
	w := keystore.Wait{CallTimeout: storeTimeout}
	if wait > 0 {
		w.Min, w.Max, w.Timeout = 10*time.Millisecond, 250*time.Millisecond, wait
	}
	return w
}

// Release gives c back to s, so that a retry executes; sctx is the store
// call's context. A stale token (keystore.ErrLeaseLost: an operator
// released the key, or another request took it over once the lease lapsed)
// is logged at Info, any other failure at Error (the key then stays in
// progress until its lease ends), each message prefixed with pkg and
// carrying why.
func Release(sctx context.Context, s keystore.Store, c keystore.Claim, logger *slog.Logger, pkg, why string) {
	err := s.Release(sctx, c)
	switch {
	case errors.Is(err, keystore.ErrLeaseLost):
		logger.InfoContext(sctx, pkg+": the key was released by an operator (or taken over) while in progress; nothing to release", "why", why, "err", err)
	case err != nil:
		logger.ErrorContext(sctx, pkg+": release failed; the key stays in progress until its lease ends", "why", why, "err", err)
	}
}
