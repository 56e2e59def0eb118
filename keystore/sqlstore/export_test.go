package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/idem-go/idem/sqldialect"
)

// SetDigest replaces the digest of s and its scoped views, to make
// collisions.
func SetDigest(s *Store, f func(salt, name []byte) [16]byte) { s.sh.digest = f }

// RowsSchema is the schema an earlier release created for table.
func RowsSchema(d sqldialect.Dialect, table string) []string {
	n, err := tableNames(d, table)
	if err != nil {
		panic(err)
	}
	return rowsSchema(d, n)
}

// LoadDone writes keys as done rows of s's layout with an empty result,
// expiring ttl from now (negative: already expired), in transactions of
// 50 statements of 500 rows, the way Complete leaves them; tokens count up
// from token. It is the scale tests' fast fill.
func LoadDone(ctx context.Context, s *Store, keys []string, ttl time.Duration, token int64) error {
	l, err := s.current(ctx)
	if err != nil {
		return err
	}
	pg := s.d == sqldialect.Postgres
	cols, casts := "scope, idem_key", []string{"::text", "::bytea"}
	if l.q.layout == LayoutDigest {
		cols, casts = "d, name", []string{"::uuid", "::bytea"}
	}
	casts = append(casts, "::smallint", "::bigint", "::integer", "::bytea", "::bytea", "::bigint")
	now := nowSQLite
	if pg {
		now = "now()"
	}
	const page = 500
	var tx *sql.Tx
	for i := 0; i < len(keys); i += page {
		if i%(50*page) == 0 {
			if tx != nil {
				if err := tx.Commit(); err != nil {
					return err
				}
			}
			if tx, err = s.db.BeginTx(ctx, nil); err != nil {
				return err
			}
			defer tx.Rollback()
		}
		batch := keys[i:min(i+page, len(keys))]
		args := make([]any, 0, 8*len(batch))
		for _, k := range batch {
			token++
			args = append(append(args, s.keyArgs(l, k)...), stDone, token, 0, nil, []byte{}, int64(ttl/time.Microsecond))
		}
		insert := "INSERT INTO " + s.sh.n.table + " (" + cols + ", state, token, takeovers, fingerprint, result, expires_at) VALUES " +
			values(s.d, len(batch), func(c int, p string) string {
				switch {
				case pg && c == 7:
					return "now() + " + p + casts[c] + " * interval '1 microsecond'"
				case c == 7:
					return now + " + " + p
				case pg:
					return p + casts[c]
				}
				return p
			})
		if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
			return err
		}
	}
	if tx == nil {
		return nil
	}
	return tx.Commit()
}
