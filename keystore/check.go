package keystore

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotMigrated is wrapped by the errors of a store whose schema does not
// exist: a SQL store's table before [sqlstore.Store.Migrate] ran (or its
// SchemaSQL was applied). It is not transient: retrying does not help until
// an operator migrates the store, so adapters answer it as a server error
// that names the fix, not as "unavailable, retry".
//
// [sqlstore.Store.Migrate]: https://pkg.go.dev/github.com/idem-go/idem/keystore/sqlstore#Store.Migrate
var ErrNotMigrated = errors.New("keystore: store not migrated")

// Check reports whether s is ready to serve, without changing anything:
// with a store that lets operators look at keys ([Inspector], through
// every wrapper, see [As]) it looks up a key that does not exist. It
// returns nil when the store answers, an error wrapping [ErrNotMigrated]
// when its schema does not exist, and the store's error when it does not
// answer. With a store that is no Inspector it returns nil: such a store is
// checked by its first call. Call it at start-up, under a timeout, before
// serving: idemhttp and idemgrpc answer every keyed request with an error
// while the store is not migrated.
func Check(ctx context.Context, s Store) error {
	in, ok := As[Inspector](s)
	if !ok {
		return nil
	}
	_, err := in.Inspect(ctx, "idem-readiness-check")
	if err == nil || errors.Is(err, ErrNotFound) {
		return nil
	}
	return fmt.Errorf("keystore: check: %w", err)
}
