package idem

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Sentinel errors shared by idem's packages. Each is defined here once and
// every package wraps it, so one errors.Is test works whichever package
// returned the error. Messages follow one shape: the package's name, the
// problem, then the wrapped sentinel or cause
// ("keystore: lease -1s is not positive: idem: invalid argument").
var (
	// ErrInvalidOption is wrapped by every constructor that rejects an option.
	ErrInvalidOption = errors.New("idem: invalid option")
	// ErrInvalidKey is wrapped when a key is empty, too long or malformed.
	ErrInvalidKey = errors.New("idem: invalid key")
	// ErrFingerprintMismatch is returned when a key that is already recorded
	// arrives with a different payload fingerprint. Nothing is applied.
	ErrFingerprintMismatch = errors.New("idem: key reused with a different fingerprint")
	// ErrInvalidArgument is wrapped when a call's argument is out of range
	// (a negative lease, an oversized fingerprint, an empty batch entry).
	// Nothing was applied.
	ErrInvalidArgument = errors.New("idem: invalid argument")
	// ErrMissingKey is wrapped when a request or message carries no
	// idempotency key and the caller requires one.
	ErrMissingKey = errors.New("idem: no idempotency key")
	// ErrClosed is wrapped by every call made after Close, and by a consumer
	// whose connection or channel closed under it.
	ErrClosed = errors.New("idem: closed")
)

// MaxFingerprintLen is the longest payload fingerprint, in bytes, that idem
// stores, everywhere (a SHA-512 digest fits). Pass a digest of the payload,
// never the payload itself.
const MaxFingerprintLen = 64

// ValidateFingerprint reports a fingerprint longer than [MaxFingerprintLen];
// the error wraps [ErrInvalidArgument]. An empty fingerprint is valid: it
// means "do not check the payload".
func ValidateFingerprint(fp []byte) error {
	if len(fp) > MaxFingerprintLen {
		return fmt.Errorf("fingerprint is %d bytes, longer than %d; pass a digest of the payload: %w", len(fp), MaxFingerprintLen, ErrInvalidArgument)
	}
	return nil
}

// FingerprintsConflict is idem's one rule for a reused key: the stored and
// the arriving fingerprints conflict when both are non-empty and differ. An
// empty side means "not checked", so it never conflicts.
func FingerprintsConflict(stored, got []byte) bool {
	return len(stored) > 0 && len(got) > 0 && string(stored) != string(got)
}

// MaxKeyLen is the longest key, in bytes, that idem accepts (the limit of the
// IETF Idempotency-Key draft and of Stripe).
const MaxKeyLen = 255

// ValidateKey reports whether key is usable as an idempotency key: 1 to
// [MaxKeyLen] bytes of valid UTF-8 with no NUL byte. The error wraps
// [ErrInvalidKey] and names the problem.
//
// The rule is the same for every store and dialect, and it is checked before
// any I/O: a key that one database would store and another would reject
// (PostgreSQL's text refuses NUL and invalid UTF-8 with SQLSTATE 22021) is
// refused everywhere, up front, instead of failing on every redelivery of its
// message. Binary identifiers (a raw 16-byte UUID, say) must be encoded
// first, as hex or base64.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, longer than the maximum of %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8 (byte %d); encode binary ids as hex or base64", ErrInvalidKey, invalidUTF8At(key))
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: key contains a NUL byte at %d", ErrInvalidKey, strings.IndexByte(key, 0))
	}
	return nil
}

// invalidUTF8At returns the offset of the first byte of key that is not part
// of a valid UTF-8 sequence.
func invalidUTF8At(key string) int {
	for i, r := range key {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(key[i:]); size == 1 {
				return i
			}
		}
	}
	return -1
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err to tell an adapter that redelivering the message cannot
// succeed (a malformed payload, say): the adapter dead-letters or acknowledges
// it instead of redelivering forever. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
