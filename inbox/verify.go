package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/inbox/internal/engine/bucketmysql"
	"github.com/idem-go/idem/inbox/internal/engine/bucketsql"
	"github.com/idem-go/idem/inbox/internal/engine/rows"
	"github.com/idem-go/idem/sqldialect"
)

// ErrUnsafeTable is wrapped when the key table exists but cannot be
// trusted to reject a second (consumer, idem_key): with such a table every
// redelivery would be applied again, or a fresh message dropped as a
// duplicate, so the Inbox refuses to work on it.
var ErrUnsafeTable = engine.ErrUnsafeTable

// ErrNotMigrated is wrapped when the key table does not exist (in either
// layout): [Inbox.Migrate] was not called and [Inbox.SchemaSQL] was not
// applied, or the Inbox is pointed at another database or table than the
// one migrated. Nothing was recorded or applied; it is a deployment error,
// which no retry cures.
var ErrNotMigrated = engine.ErrNotMigrated

// Verify checks, with the database's catalog, that the key table enforces
// exactly the uniqueness the inbox relies on, and returns an error wrapping
// [ErrUnsafeTable] that names the table and the problem otherwise (an error
// wrapping [ErrNotMigrated] when the table does not exist at all):
//
//   - a unique index or primary key on exactly (consumer, idem_key), in any
//     order: not partial, not on expressions or column prefixes, not
//     deferrable, valid;
//   - no other unique index that could fire first: every other one must
//     contain both consumer and idem_key (a superset is implied by the exact
//     one and never fires). A unique index on (idem_key) alone is refused:
//     it makes the same key under two consumers collide, and the second
//     consumer's message would be dropped as a duplicate;
//   - consumer and idem_key compare byte for byte and hold 255 bytes:
//     PostgreSQL text or varchar(≥255) with a deterministic collation (not
//     char(n), which ignores trailing spaces, nor citext); SQLite TEXT or
//     BLOB affinity with the BINARY collation; MySQL VARBINARY(≥255). The
//     fingerprint column holds 64 bytes (PostgreSQL bytea, MySQL
//     VARBINARY(64) or a BLOB);
//   - no BEFORE INSERT trigger or rule that could rewrite or skip the key's
//     insert, and (MySQL) a transactional engine (InnoDB), (PostgreSQL) a
//     logged, permanent table: a MyISAM table commits the key without the
//     effect, an unlogged one forgets every key in a crash.
//
// A table in the bucketed layout ([LayoutBuckets]: a <table>_meta table
// exists) is checked instead for what that layout relies on: every bucket
// table <table>_k<start> has exactly one unique index, its primary key on
// (d) (uuid on PostgreSQL, BLOB with the BINARY collation on SQLite,
// BINARY(16) in InnoDB on MySQL), no
// trigger, and is a logged table; a rows table beside it must carry the
// trigger [Inbox.MigrateLayout] installs.
//
// Every Inbox runs Verify once, before its first Process, ProcessBatch,
// ProcessBatchSet or Sweep (and Migrate runs it after creating the table),
// so a table made by a migration tool is checked too; after one success it
// is not repeated. Calling Verify yourself, at start-up, surfaces a bad
// table before the first message. Verify only reads the catalog.
func (in *Inbox) Verify(ctx context.Context) error {
	_, _, err := in.verify(ctx)
	return err
}

// verify is Verify, returning the engine of the table's layout and, for
// the bucketed layout, its state.
func (in *Inbox) verify(ctx context.Context) (engine.Engine, *bucket.State, error) {
	var b *bucket.State
	err := in.h.ReadOnlyTx(ctx, func(tx *sql.Tx) error {
		var err error
		if b, err = bucket.Load(ctx, tx, in.h); err != nil {
			return err
		}
		if b == nil {
			if in.dialect == sqldialect.MySQL {
				return bucketmysql.MidMigration(ctx, tx, in.cfg.table)
			}
			return nil
		}
		if in.dialect == sqldialect.MySQL {
			if galera, err := bucketmysql.Galera(ctx, tx); err != nil {
				return err
			} else if galera {
				return fmt.Errorf("%w: table %s: %w", ErrUnsafeTable, in.cfg.table, bucketmysql.ErrGaleraBuckets)
			}
		}
		return b.Verify(ctx, tx)
	})
	if err != nil {
		if errors.Is(err, ErrUnsafeTable) {
			return nil, nil, err
		}
		if m := in.mismatch(ctx, err); m != nil {
			return nil, nil, m
		}
		return nil, nil, fmt.Errorf("inbox: verify table %s: %w", in.cfg.table, err)
	}
	switch {
	case b == nil:
		err := rows.Verify(ctx, in.db, in.dialect, in.cfg.table, func(err error) error { return in.mismatch(ctx, err) })
		if err != nil {
			return nil, nil, err
		}
		return in.rows, nil, nil
	case in.dialect == sqldialect.MySQL:
		return bucketmysql.New(b), b, nil
	default:
		return bucketsql.New(b), b, nil
	}
}

// mismatch returns an error wrapping a [sqldialect.MismatchError] (and
// err) when the database is not of the Inbox's dialect, and nil otherwise:
// the server's own error (a syntax error, an unknown table sqlite_master)
// does not say what to change. It runs on error paths only.
func (in *Inbox) mismatch(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrUnsafeTable) || errors.Is(err, ErrNotMigrated) {
		return nil
	}
	var m error
	_ = in.h.ReadOnlyTx(ctx, func(tx *sql.Tx) error {
		m = in.dialect.Mismatch(ctx, tx, "the inbox", err)
		return nil
	})
	if m != nil {
		return fmt.Errorf("inbox: %w", m)
	}
	return nil
}
