package idem

import (
	"errors"
	"fmt"
)

// Sentinel errors shared by idem's packages. Packages re-export them under
// their own names, so errors.Is works whichever name the caller uses.
var (
	// ErrInvalidOption is wrapped by every constructor that rejects an option.
	ErrInvalidOption = errors.New("idem: invalid option")
	// ErrInvalidKey is wrapped when a key is empty, too long or malformed.
	ErrInvalidKey = errors.New("idem: invalid key")
	// ErrFingerprintMismatch is returned when a key that is already recorded
	// arrives with a different payload fingerprint. Nothing is applied.
	ErrFingerprintMismatch = errors.New("idem: key reused with a different fingerprint")
)

// MaxKeyLen is the longest key, in bytes, that idem accepts (the limit of the
// IETF Idempotency-Key draft and of Stripe).
const MaxKeyLen = 255

// ValidateKey reports whether key is usable as an idempotency key: not empty
// and at most [MaxKeyLen] bytes. The error wraps [ErrInvalidKey].
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, longer than the maximum of %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
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
