package keystore

import (
	"bytes"
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
	// MaxFingerprintLen is the longest fingerprint accepted, in bytes.
	// Fingerprints are digests (SHA-256 is 32 bytes); a longer one is almost
	// certainly a payload passed by mistake.
	MaxFingerprintLen = 128
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
// idem.ValidateKey; the error wraps [ErrInvalidKey]), a fingerprint of at
// most [MaxFingerprintLen] bytes and a positive lease (both wrap
// [ErrInvalidArgument]).
func ValidateReserve(key string, fp []byte, lease time.Duration) error {
	if err := idem.ValidateKey(key); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if len(fp) > MaxFingerprintLen {
		return fmt.Errorf("%w: fingerprint is %d bytes, longer than %d", ErrInvalidArgument, len(fp), MaxFingerprintLen)
	}
	if lease <= 0 {
		return fmt.Errorf("%w: lease %v is not positive", ErrInvalidArgument, lease)
	}
	return nil
}

// ValidateComplete checks the arguments of [Store.Complete]: the claim (see
// [ValidateRelease]), a positive ttl (wraps [ErrInvalidArgument]) and a
// result of at most maxResult bytes (wraps [ErrResultTooLarge]).
func ValidateComplete(c Claim, result []byte, ttl time.Duration, maxResult int) error {
	if err := ValidateRelease(c); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: ttl %v is not positive", ErrInvalidArgument, ttl)
	}
	if len(result) > maxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrResultTooLarge, len(result), maxResult)
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
		return fmt.Errorf("%w: claim on %q is %v, not acquired", ErrInvalidArgument, c.Key, c.State)
	}
	if c.Token == 0 {
		return fmt.Errorf("%w: claim on %q has no token", ErrInvalidArgument, c.Key)
	}
	return nil
}

// ValidateScope checks a scope name: 1 to [MaxScopeLen] bytes of UTF-8
// without NUL, '{' or '}' (Redis uses the scope as a Cluster hash tag, in
// braces). The error wraps [ErrInvalidArgument].
func ValidateScope(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: scope is empty", ErrInvalidArgument)
	case len(name) > MaxScopeLen:
		return fmt.Errorf("%w: scope is %d bytes, longer than %d", ErrInvalidArgument, len(name), MaxScopeLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: scope %q is not UTF-8", ErrInvalidArgument, name)
	case strings.ContainsAny(name, "\x00{}"):
		return fmt.Errorf("%w: scope %q contains NUL, '{' or '}'", ErrInvalidArgument, name)
	}
	return nil
}

// FingerprintsConflict reports whether a Reserve with fingerprint got must
// fail against a live key stored with fingerprint stored: both are
// non-empty and they differ. An empty fingerprint on either side means "not
// checked".
func FingerprintsConflict(stored, got []byte) bool {
	return len(stored) > 0 && len(got) > 0 && !bytes.Equal(stored, got)
}

// MismatchError returns the error a store returns for a fingerprint
// conflict on key; it wraps [ErrFingerprintMismatch].
func MismatchError(key string) error {
	return fmt.Errorf("keystore: key %q: %w", key, ErrFingerprintMismatch)
}

// LeaseLostError returns the error a store returns when token is not the
// current token of key; it wraps [ErrLeaseLost].
func LeaseLostError(op, key string, token uint64) error {
	return fmt.Errorf("%w: %s of key %q with token %d", ErrLeaseLost, op, key, token)
}
