package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The functions below call an optional interface of s, as [Scope] does,
// and fail with an error wrapping errors.ErrUnsupported when s does not
// have it. A wrapper of a Store (metrics, tracing) forwards the optional
// interfaces with them, so that it has every method whatever it wraps and
// says which one the wrapped store lacks; [As] and [CanExtend] look
// through its Unwrap to tell whether the method works.

// Extend calls s's [Extender].
func Extend(ctx context.Context, s Store, c Claim, lease time.Duration) (Claim, error) {
	if ex, ok := s.(Extender); ok {
		return ex.Extend(ctx, c, lease)
	}
	return Claim{}, unsupported(s, "renew leases")
}

// Sweep calls s's [Sweeper].
func Sweep(ctx context.Context, s Store, batch int) (int, error) {
	if sw, ok := s.(Sweeper); ok {
		return sw.Sweep(ctx, batch)
	}
	return 0, unsupported(s, "sweep")
}

// Inspect calls s's [Inspector].
func Inspect(ctx context.Context, s Store, key string) (KeyInfo, error) {
	if in, ok := s.(Inspector); ok {
		return in.Inspect(ctx, key)
	}
	return KeyInfo{}, unsupported(s, "inspect keys")
}

// List calls s's [Inspector].
func List(ctx context.Context, s Store, opts ListOptions) ([]KeyInfo, string, error) {
	if in, ok := s.(Inspector); ok {
		return in.List(ctx, opts)
	}
	return nil, "", unsupported(s, "list keys")
}

// Forget calls s's [Forgetter].
func Forget(ctx context.Context, s Store, key string) error {
	if f, ok := s.(Forgetter); ok {
		return f.Forget(ctx, key)
	}
	return unsupported(s, "forget keys")
}

func unsupported(s Store, what string) error {
	return fmt.Errorf("keystore: %T cannot %s: %w", s, what, errors.ErrUnsupported)
}
