package keystore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// KeyInfo is what an operator sees of one key: [Inspector] reports it
// without changing anything.
type KeyInfo struct {
	// Key is the key, as passed to Reserve (within the store's scope).
	Key string
	// State is InProgress (a lease, live or lapsed) or Done.
	State State
	// Token is the fencing token of the lease (InProgress), or of the
	// lease that completed the key (Done) when the store keeps it, else 0.
	// A fenced [Store.Release] with Claim{Key, State: Acquired, Token}
	// frees an in-progress key whose holder is known to be dead.
	Token uint64
	// Expires is when the lease ends (InProgress) or the result expires
	// (Done), by the store's clock where the store has one. A lease whose
	// Expires has passed has lapsed: the next Reserve takes it over.
	Expires time.Time
	// Fingerprint is the stored fingerprint in hex, "" when none.
	Fingerprint string
	// ResultSize is the stored result's length in bytes (Done).
	ResultSize int
	// Result is the stored result (Done), set by Inspect only; List
	// leaves it nil.
	Result []byte
}

// Lapsed reports whether k is a lease that has ended at now: its holder
// neither completed nor released it (it died, or outlived its lease
// without renewing), and the next Reserve takes the key over.
func (k KeyInfo) Lapsed(now time.Time) bool {
	return k.State == InProgress && !k.Expires.After(now)
}

// ListOptions selects and pages the keys [Inspector.List] returns.
type ListOptions struct {
	// State keeps keys in this state only (InProgress or Done); 0 keeps
	// every state.
	State State
	// After continues a listing: pass the previous call's next.
	After string
	// Limit is the most keys returned (default [DefaultListLimit], at
	// most [MaxListLimit]).
	Limit int
}

// Limits of [Inspector.List].
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Inspector is implemented by stores that let operators look at keys.
// Neither method changes anything, nor counts as a Reserve: inspecting a
// lapsed lease does not take it over.
//
// Inspect returns the key's [KeyInfo], or an error wrapping [ErrNotFound]
// when the key is absent (never reserved, released, or its result expired).
//
// List returns keys in a stable order (the store's), filtered by
// opts.State, at most opts.Limit of them, and next, the cursor to pass as
// opts.After for the following page ("" when there is none). A page may
// hold fewer keys than the limit even when more follow. Keys written while
// a listing pages may or may not appear in it.
type Inspector interface {
	Inspect(ctx context.Context, key string) (KeyInfo, error)
	List(ctx context.Context, opts ListOptions) (keys []KeyInfo, next string, err error)
}

// Forgetter is implemented by stores that delete a done key on request, so
// that the next Reserve runs its effect again (a result stored by mistake,
// a replay that must not happen). Forget deletes nothing else: on an
// in-progress key it returns an error wrapping [ErrInProgress] (free one
// with a fenced Release), on an absent key one wrapping [ErrNotFound].
// Tokens keep increasing across Forget, as across expiry.
type Forgetter interface {
	Forget(ctx context.Context, key string) error
}

// ErrNotFound: the key is absent. Returned by [Inspector.Inspect] and
// [Forgetter.Forget].
var ErrNotFound = errors.New("keystore: key not found")

// ValidateList checks and normalises opts for [Inspector.List]: a state of
// 0, InProgress or Done, and a limit in [0, MaxListLimit] (0 becomes
// [DefaultListLimit]); the error wraps idem.ErrInvalidArgument. A ctx that
// has ended is refused too, with its error, so that no store starts a
// listing it cannot finish.
func ValidateList(ctx context.Context, opts ListOptions) (ListOptions, error) {
	if err := ctx.Err(); err != nil {
		return opts, fmt.Errorf("keystore: list: %w", err)
	}
	switch opts.State {
	case 0, InProgress, Done:
	default:
		return opts, fmt.Errorf("keystore: list state %v: want in_progress, done or any: %w", opts.State, idem.ErrInvalidArgument)
	}
	switch {
	case opts.Limit < 0 || opts.Limit > MaxListLimit:
		return opts, fmt.Errorf("keystore: list limit %d: want 1 to %d: %w", opts.Limit, MaxListLimit, idem.ErrInvalidArgument)
	case opts.Limit == 0:
		opts.Limit = DefaultListLimit
	}
	return opts, nil
}

// ValidateInspect checks the key passed to Inspect or Forget (see
// idem.ValidateKey; the error wraps idem.ErrInvalidKey), and refuses a ctx
// that has ended, with its error, before any I/O.
func ValidateInspect(ctx context.Context, key string) error {
	if err := idem.ValidateKey(key); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("keystore: key %q: %w", key, err)
	}
	return nil
}

// NotFoundError returns the error a store returns for an absent key; it
// wraps [ErrNotFound].
func NotFoundError(key string) error {
	return fmt.Errorf("keystore: key %q: %w", key, ErrNotFound)
}

// ForgetInProgressError returns the error a store's Forget returns for a
// key whose lease is live: nothing is changed, and an operator releases it
// with its token instead. It wraps [ErrInProgress].
func ForgetInProgressError(key string) error {
	return fmt.Errorf("keystore: forget %q: release it with its token: %w", key, ErrInProgress)
}

// HexFingerprint formats a stored fingerprint for [KeyInfo].
func HexFingerprint(fp []byte) string { return hex.EncodeToString(fp) }

// ParseState parses a state's name as [State.String] writes it
// (in_progress, done); "" and "any" are 0, every state.
func ParseState(s string) (State, error) {
	switch s {
	case "", "any":
		return 0, nil
	case "in_progress", "in-progress", "inprogress":
		return InProgress, nil
	case "done":
		return Done, nil
	}
	return 0, fmt.Errorf("keystore: state %q: want in_progress, done or any: %w", s, idem.ErrInvalidArgument)
}

// ReleaseToken is the fenced release of an operator who knows key's holder
// is dead: Release with the claim that holder got, built from key and
// token (see [KeyInfo.Token]). A token that is no longer the key's (the
// holder completed or released it, or somebody took it over) gets an error
// wrapping [ErrLeaseLost] and changes nothing.
func ReleaseToken(ctx context.Context, s Store, key string, token uint64) error {
	return s.Release(ctx, Claim{Key: key, State: Acquired, Token: token})
}
