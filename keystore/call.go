package keystore

import (
	"context"
	"time"
)

// CallTimeout bounds the I/O of one store call once it has started, and the
// Complete or Release that [Do] issues after fn returns.
const CallTimeout = 10 * time.Second

// Detach returns the context under which a store runs a call that has
// passed its ctx check: ctx's values without its cancellation or deadline,
// bounded by [CallTimeout]. A write that the caller's cancellation
// interrupts half-way may commit and still report context.Canceled (a
// database/sql statement or COMMIT, a Redis reply not read), and the caller
// then believes that nothing happened: a Reserve that holds a key for a
// whole lease with nobody to release it, a Complete or Release that did
// land. Under Detach the call runs to its end and answers truthfully; only
// the timeout (a store that stopped answering) can still leave its outcome
// unknown. Release the returned cancel func when the call is done.
func Detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CallTimeout)
}
