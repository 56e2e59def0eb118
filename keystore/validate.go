package keystore

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idem-go/idem"
)

// Limits every store enforces.
const (
	// DefaultMaxResultSize is the result size limit of idem's stores unless
	// configured otherwise: 1 MiB.
	DefaultMaxResultSize = 1 << 20
	// MaxScopeLen is the longest scope name accepted, in bytes.
	MaxScopeLen = 255
	// DefaultScope is the scope of a store that was not given one.
	DefaultScope = "default"
	// MaxDuration is the longest lease or TTL a store applies: 100 years
	// of 365 days. A longer one (up to math.MaxInt64 ns, about 292 years)
	// is shortened to it, so that it means "practically forever" in every
	// store, never an overflow that ends it at once (time.Time.Add, µs in
	// SQL, ms in Redis's Lua) and never a store error (PostgreSQL's
	// interval and timestamp ranges, Redis's PX limit).
	MaxDuration = 100 * 365 * 24 * time.Hour
)

// CapDuration returns d shortened to at most [MaxDuration]. Stores apply
// it to every lease and TTL after validation.
func CapDuration(d time.Duration) time.Duration { return min(d, MaxDuration) }

// The functions below are for implementers of [Store]: idem's stores call
// them first so that every backend rejects the same input with the same
// errors, before any I/O.

// ValidateReserve checks the arguments of [Store.Reserve]: the key (see
// idem.ValidateKey; the error wraps idem.ErrInvalidKey), a fingerprint of at
// most idem.MaxFingerprintLen bytes and a positive lease (both wrap
// idem.ErrInvalidArgument).
func ValidateReserve(key string, fp []byte, lease time.Duration) error {
	if err := idem.ValidateKey(key); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if err := idem.ValidateFingerprint(fp); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if lease <= 0 {
		return fmt.Errorf("keystore: lease %v is not positive: %w", lease, idem.ErrInvalidArgument)
	}
	return nil
}

// ValidateComplete checks the arguments of [Store.Complete]: the claim (see
// [ValidateRelease]), a positive ttl (wraps idem.ErrInvalidArgument) and a
// result of at most maxResult bytes (wraps [ErrResultTooLarge]).
func ValidateComplete(c Claim, result []byte, ttl time.Duration, maxResult int) error {
	if err := ValidateRelease(c); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("keystore: ttl %v is not positive: %w", ttl, idem.ErrInvalidArgument)
	}
	if len(result) > maxResult {
		return fmt.Errorf("keystore: result is %d bytes, the limit is %d: %w", len(result), maxResult, ErrResultTooLarge)
	}
	return nil
}

// ValidateRelease checks the claim passed to [Store.Release] or
// [Store.Complete]: a valid key, State Acquired and a non-zero token. A
// claim in any other state was never the caller's to give back.
func ValidateRelease(c Claim) error {
	if err := idem.ValidateKey(c.Key); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if c.State != Acquired {
		return fmt.Errorf("keystore: claim on %q is %v, not acquired: %w", c.Key, c.State, idem.ErrInvalidArgument)
	}
	if c.Token == 0 {
		return fmt.Errorf("keystore: claim on %q has no token: %w", c.Key, idem.ErrInvalidArgument)
	}
	return nil
}

// ValidateScope checks a scope name: 1 to [MaxScopeLen] bytes of UTF-8
// without NUL, '{' or '}' (Redis uses the scope as a Cluster hash tag, in
// braces). The error wraps idem.ErrInvalidArgument.
func ValidateScope(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("keystore: scope is empty: %w", idem.ErrInvalidArgument)
	case len(name) > MaxScopeLen:
		return fmt.Errorf("keystore: scope is %d bytes, longer than %d: %w", len(name), MaxScopeLen, idem.ErrInvalidArgument)
	case !utf8.ValidString(name):
		return fmt.Errorf("keystore: scope %q is not UTF-8: %w", name, idem.ErrInvalidArgument)
	case strings.ContainsAny(name, "\x00{}"):
		return fmt.Errorf("keystore: scope %q contains NUL, '{' or '}': %w", name, idem.ErrInvalidArgument)
	}
	return nil
}

// MismatchError returns the error a store returns for a fingerprint
// conflict on key; it wraps idem.ErrFingerprintMismatch.
func MismatchError(key string) error {
	return fmt.Errorf("keystore: key %q: %w", key, idem.ErrFingerprintMismatch)
}

// LeaseLostError returns the error a store returns when token is not the
// current token of key; it wraps [ErrLeaseLost].
func LeaseLostError(op, key string, token uint64) error {
	return fmt.Errorf("keystore: %s of key %q with token %d: %w", op, key, token, ErrLeaseLost)
}
