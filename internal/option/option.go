// Package option applies a package's functional options the one way idem's
// constructors do: in order, once, in New, with a nil option refused.
// Every option has the shape func(*config) error; its error wraps
// idem.ErrInvalidOption and names its package.
package option

import (
	"fmt"

	"github.com/idem-go/idem"
)

// Apply runs opts over cfg in order and returns the first error. A nil
// option is an error wrapping idem.ErrInvalidOption, prefixed with pkg.
func Apply[C any, O ~func(*C) error](pkg string, cfg *C, opts []O) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%s: nil option: %w", pkg, idem.ErrInvalidOption)
		}
		if err := o(cfg); err != nil {
			return err
		}
	}
	return nil
}

// Check returns an option that runs set when ok holds, and otherwise fails
// with the problem that format and args describe, prefixed with pkg and
// wrapping idem.ErrInvalidOption. ok is decided when the option is made,
// from the option's own arguments.
func Check[C any](pkg string, ok bool, set func(*C), format string, args ...any) func(*C) error {
	return func(c *C) error {
		if !ok {
			return fmt.Errorf("%s: %s: %w", pkg, fmt.Sprintf(format, args...), idem.ErrInvalidOption)
		}
		set(c)
		return nil
	}
}

// Valid is [Check] for an argument whose validation returns an error: the
// option runs set when err is nil, and otherwise fails with err, prefixed
// with pkg and wrapping idem.ErrInvalidOption too.
func Valid[C any](pkg string, err error, set func(*C)) func(*C) error {
	return func(c *C) error {
		if err != nil {
			return fmt.Errorf("%s: %w: %w", pkg, err, idem.ErrInvalidOption)
		}
		set(c)
		return nil
	}
}
