package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store reserves, completes and releases idempotency keys. It is the one
// extension point of this package; implementations are in the memstore,
// sqlstore (PostgreSQL, SQLite; sqlitestore opens a file), redisstore,
// natsstore and dynamostore packages, and every one of them passes
// the conformance suite in package storetest. Optional behaviour is added
// through separate interfaces ([Extender], [Scoper], [Sweeper]), never by
// growing Store.
//
// All methods are safe for concurrent use, and each is atomic: a crash or a
// cancelled ctx leaves the key either as it was before the call or as the
// call would have left it, never half-written. When a call returns an error
// that is not one of the sentinels below (a network error, say), the caller
// cannot know whether the store applied it; the lease bounds the damage,
// because an in-progress key always becomes reservable again when its lease
// expires.
//
// Cancellation: ctx means "do not start", never "abandon half-way". A call
// whose ctx has ended before it starts returns an error wrapping ctx.Err()
// and writes nothing. A call already under way when ctx ends runs to its
// end (idem's stores use [Detach], bounded by [CallTimeout]) and answers
// truthfully: a Reserve that took the key returns its Acquired claim, a
// Complete or Release that landed returns nil. A store cannot be made to
// answer truthfully for a call cut half-way, since its write may have
// committed while the answer was lost: so a store that does give up when
// ctx ends must treat that error as outcome unknown, and callers that
// need a true answer (as [Do] does) call it under [Detach] themselves.
//
// Leases and TTLs longer than [MaxDuration] are capped at it (practically
// forever, never an overflow into the past), and shorter than the store's
// resolution are rounded up to it.
type Store interface {
	// Reserve claims key for one execution of its effect. Outcomes, none of
	// them an error:
	//
	//   - absent, or an expired lease or result: Claim{State: Acquired} with
	//     a fencing token higher than any token this key has had before and a
	//     lease of the given length, measured by the store's clock;
	//   - another live lease: Claim{State: InProgress, Expires: its end};
	//   - completed and not yet expired: Claim{State: Done, Result: ...}.
	//
	// A non-empty fp that differs from the non-empty fingerprint stored with
	// a live key gives idem.ErrFingerprintMismatch and changes nothing. Bad input
	// (see [ValidateReserve]) is rejected before the store is touched.
	//
	// Crash: if the process dies after Reserve returns Acquired, the key stays
	// in progress until the lease expires; then the next Reserve takes it over
	// with a higher token. If it dies during Reserve, either nothing was
	// written or the same holds.
	Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (Claim, error)

	// Complete records result for the claim's key and marks it done for ttl,
	// measured by the store's clock from the moment of completion. It
	// succeeds only while c.Token is still the key's current token: once
	// another Reserve has taken the key over (or the expired lease was swept
	// away), it returns ErrLeaseLost and writes nothing. It may succeed after
	// the lease has expired if nobody has taken the key over yet, because
	// then no other execution can have started. Completing the same claim
	// again returns nil and keeps the first result.
	//
	// Crash: if the process dies before Complete lands, the key stays in
	// progress until its lease expires, and a retry after that runs the
	// effect again: send the key to the downstream system too (Stripe's
	// Idempotency-Key) so that the repeat is absorbed there.
	Complete(ctx context.Context, c Claim, result []byte, ttl time.Duration) error

	// Release gives the key back (state absent) so that a retry may run the
	// effect at once; use it when the effect failed and did not happen. A
	// stale token gives ErrLeaseLost and deletes nothing. Releasing the same
	// claim again, before the key is reserved anew, deletes nothing either:
	// it returns nil in a store that keeps a released key's token (so that a
	// client's retry of a Release that landed is not reported as a lost
	// lease: dynamostore), ErrLeaseLost in one that deletes the key.
	//
	// Crash: if the process dies before Release lands, the lease expires on
	// its own, later.
	Release(ctx context.Context, c Claim) error
}

// State is the state of a key as a [Claim] reports it.
type State int

// The states a Claim can report.
const (
	// Acquired: the caller holds the lease and must run the effect, then
	// call Complete, or Release if the effect did not happen.
	Acquired State = iota + 1
	// InProgress: another holder's lease is live. Retry later, or wait.
	InProgress
	// Done: the effect completed; Result is what Complete stored.
	Done
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case InProgress:
		return "in_progress"
	case Done:
		return "done"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Claim is the answer of [Store.Reserve].
type Claim struct {
	// Key is the key that was reserved.
	Key string
	// State says what the caller must do next.
	State State
	// Token is the fencing token of the caller's lease, set only when State
	// is Acquired. A key's tokens strictly increase over its whole life,
	// across Release and expiry, so a later holder always has a higher token
	// than an earlier one: pass it to downstream systems that can reject
	// writes from a stale holder.
	Token uint64
	// Expires is when the lease (Acquired, InProgress) or the stored result
	// (Done) expires, by the store's clock. Use it for Retry-After hints,
	// not for deciding whether a lease is still held: only the store decides.
	Expires time.Time
	// Result is the stored result when State is Done. A nil or empty result
	// replays as an empty slice, which may be nil.
	Result []byte
	// Takeover reports that this Acquired claim replaced a lease that had
	// expired without Complete or Release: the previous holder may have run
	// the effect before it died. It is best effort: it is false when the
	// store had already discarded the expired lease (by a sweep, or because
	// its grace period ended).
	Takeover bool
}

// Scoper is implemented by stores that keep several scopes apart in one
// table or keyspace. Scope returns a view of the same store in which every
// key lives in the scope name, validated with [ValidateScope]. The same key
// in two scopes is two keys, and no scope can read another's results.
type Scoper interface {
	Scope(name string) (Store, error)
}

// Sweeper is implemented by stores that delete expired keys on request.
// Sweep deletes expired results and expired leases in batches of at most
// batch keys, each batch its own short operation, and returns how many it
// deleted. It is safe to run on several nodes at once. Deleting an expired
// lease cannot break fencing: tokens keep increasing, and the old holder's
// Complete then finds nothing and returns ErrLeaseLost.
type Sweeper interface {
	Sweep(ctx context.Context, batch int) (deleted int, err error)
}

// Scope returns the view of s in the scope name, when s implements
// [Scoper]. Otherwise it returns an error wrapping [errors.ErrUnsupported].
func Scope(s Store, name string) (Store, error) {
	if sc, ok := s.(Scoper); ok {
		return sc.Scope(name)
	}
	return nil, fmt.Errorf("keystore: %T does not support scopes: %w", s, errors.ErrUnsupported)
}

// Errors returned by stores and by [Do]. They are always wrapped with
// context; test them with errors.Is.
var (
	// ErrInProgress is returned by Do when another holder's lease is live
	// and waiting was not requested (or ctx ended while waiting).
	ErrInProgress = errors.New("keystore: key is in progress")
	// ErrLeaseLost: Complete or Release with a token that is no longer the
	// key's current one. Nothing was written.
	ErrLeaseLost = errors.New("keystore: lease lost")
	// ErrResultTooLarge: the result exceeds the store's size limit. Nothing
	// was written; the key stays in progress under the caller's lease.
	ErrResultTooLarge = errors.New("keystore: result too large")
	// ErrFull is returned by Reserve when a bounded store holds its maximum
	// number of live keys. Nothing was evicted.
	ErrFull = errors.New("keystore: store full")
)

// InProgressError is the error [Do] returns for a key that another holder
// has in progress. It matches [ErrInProgress] with errors.Is.
type InProgressError struct {
	Key string
	// Expires is when the holder's lease ends by the store's clock: a hint
	// for Retry-After, not a promise.
	Expires time.Time
}

// Error describes the key and when its lease ends.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("keystore: key %q is in progress (lease ends %s)", e.Key, e.Expires.Format(time.RFC3339Nano))
}

// Is reports whether target is ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }
