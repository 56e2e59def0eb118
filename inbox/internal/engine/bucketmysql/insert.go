package bucketmysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bloom"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"slices"
	"strconv"
	"strings"
)

// probeSQL is the first statement of a batch of n keys (see above):
// the isolation level (w = 0), the keys found in the current bucket
// (w = 1), in the other buckets (w = 2) and, after a migration, in the
// frozen rows table (w = 3, by key text).
func (e *Engine) probeSQL(cur int64, others []int64, legacy bool, n, version int) string {
	b := e.b
	ck := "mp" + strconv.Itoa(n) + "/" + strconv.FormatInt(cur, 10) + "/" + strconv.FormatBool(legacy)
	return b.Memo(ck, version, func() string {
		in := bucket.InList(n)
		var q strings.Builder
		q.WriteString("SELECT 0 AS w, CAST(@@SESSION." + b.IsoVar + " AS BINARY) AS v")
		q.WriteString(" UNION ALL SELECT 1, d FROM " + bucket.Name(b.Table, cur) + " WHERE d IN " + in)
		for _, s := range others {
			q.WriteString(" UNION ALL (SELECT 2, d FROM " + bucket.Name(b.Table, s) + " WHERE d IN " + in + " LOCK IN SHARE MODE)")
		}
		if legacy {
			// Frozen: every row committed before the buckets were
			// used, so a plain read sees them all.
			q.WriteString(" UNION ALL SELECT 3, idem_key FROM " + b.Table + " WHERE consumer = ? AND idem_key IN " + in)
		}
		return q.String()
	})
}

func (e *Engine) insertSQL(cur int64, n, version int) string {
	b := e.b
	ck := "mi" + strconv.Itoa(n) + "/" + strconv.FormatInt(cur, 10)
	return b.Memo(ck, version, func() string {
		return "INSERT INTO " + bucket.Name(b.Table, cur) + " (d, fingerprint, idem_key) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?,?,?),", n), ",")
	})
}

// Record records msgs[idx...] and returns the keys it recorded.
func (e *Engine) Record(ctx context.Context, tx *sql.Tx, msgs []engine.Message, idx []int) (map[string]bool, error) {
	b := e.b
	starts, version, cur, err := b.WriteTarget()
	if err != nil {
		return nil, err
	}
	filters := b.FiltersFor(starts)
	var others []int64
	var ofs []*bloom.Filter
	for i, s := range starts {
		if s != cur {
			others, ofs = append(others, s), append(ofs, filters[i])
		}
	}
	legacy := b.Legacy.Load()
	inserted := make(map[string]bool, len(idx))
	for lo := 0; lo < len(idx); lo += maxRowsPerInsert {
		chunk := idx[lo:min(lo+maxRowsPerInsert, len(idx))]
		n := len(chunk)
		ds := make([][16]byte, n)
		args := make([]any, 0, n*(len(others)+2)+1)
		for j, i := range chunk {
			ds[j] = b.Digest(e.h.Consumer, msgs[i].Key)
			args = append(args, ds[j][:])
		}
		for k := range others {
			for j := range ds {
				if ofs[k] != nil && !ofs[k].MayContain(ds[j]) {
					args = append(args, nil) // ruled out by the filter
				} else {
					args = append(args, ds[j][:])
				}
			}
		}
		if legacy {
			args = append(args, e.h.Consumer)
			for _, i := range chunk {
				args = append(args, msgs[i].Key)
			}
		}
		found, foundKeys, err := e.probe(ctx, tx, e.probeSQL(cur, others, legacy, n, version), version, args)
		if err != nil {
			return nil, err
		}
		var fresh []int // positions in chunk
		for j, i := range chunk {
			if !found[ds[j]] && !foundKeys[msgs[i].Key] {
				fresh = append(fresh, j)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		// In digest order: time-ordered keys then append at the B-tree's
		// right edge, and InnoDB, seeing ascending inserts, splits pages
		// at the insert point and leaves them full (in batch order, keys
		// of one millisecond land in random order and each split leaves
		// a half-empty page behind).
		slices.SortFunc(fresh, func(x, y int) int { return bytes.Compare(ds[x][:], ds[y][:]) })
		row := func(j int) []any {
			m := msgs[chunk[j]]
			var k any
			if e.h.KeyText {
				k = m.Key
			}
			return []any{ds[j][:], engine.NullBytes(m.Fingerprint), k}
		}
		args = args[:0]
		for _, j := range fresh {
			args = append(args, row(j)...)
		}
		err = b.Exec(ctx, tx, e.insertSQL(cur, len(fresh), version), version, args)
		if err == nil {
			for _, j := range fresh {
				inserted[msgs[chunk[j]].Key] = true
			}
			continue
		}
		if !e.b.D.IsUniqueViolation(err) {
			return nil, engine.StatementError(ctx, e.b.D, err)
		}
		// A concurrent transaction recorded one of them in the current
		// bucket since the probe read it: find which, one at a time.
		for _, j := range fresh {
			err := b.Exec(ctx, tx, e.insertSQL(cur, 1, version), version, row(j))
			switch {
			case err == nil:
				inserted[msgs[chunk[j]].Key] = true
			case e.b.D.IsUniqueViolation(err):
				// recorded: a duplicate
			default:
				return nil, engine.StatementError(ctx, e.b.D, err)
			}
		}
	}
	return inserted, nil
}

// probe runs the probe statement and returns the digests and keys it
// found; it refuses an isolation level without gap locks.
func (e *Engine) probe(ctx context.Context, tx *sql.Tx, q string, version int, args []any) (map[[16]byte]bool, map[string]bool, error) {
	b := e.b
	rows, err := b.TxQuery(ctx, tx, q, version, args)
	if err != nil {
		return nil, nil, engine.StatementError(ctx, e.b.D, err)
	}
	defer rows.Close()
	var iso string
	found := map[[16]byte]bool{}
	var keys map[string]bool
	for rows.Next() {
		var w int
		var v []byte
		if err := rows.Scan(&w, &v); err != nil {
			return nil, nil, engine.StatementError(ctx, e.b.D, err)
		}
		switch {
		case w == 0:
			iso = string(v)
		case w == 3:
			if keys == nil {
				keys = map[string]bool{}
			}
			keys[string(v)] = true
		case len(v) == 16:
			found[[16]byte(v)] = true
		default:
			return nil, nil, fmt.Errorf("inbox: record keys: digest of %d bytes", len(v))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, engine.StatementError(ctx, e.b.D, err)
	}
	if iso != "REPEATABLE-READ" && iso != "SERIALIZABLE" {
		// Without gap locks two deliveries of one key straddling a
		// bucket boundary would both be applied (see above).
		return nil, nil, fmt.Errorf("inbox: the bucketed layout needs REPEATABLE READ (the default) or SERIALIZABLE transactions on MySQL (this session's level is %s): use the rows layout, or the default isolation: %w", iso, engine.ErrUnsafeTable)
	}
	return found, keys, nil
}

// Fingerprint reads the fingerprint recorded for m's key in any live
// bucket (or the frozen rows table); nil when none is recorded. Its reads lock: the
// key may have been committed after this transaction's snapshot (the probe
// waited for it), and only a locking read sees the latest version.
func (e *Engine) Fingerprint(ctx context.Context, tx *sql.Tx, m engine.Message) ([]byte, error) {
	b := e.b
	starts, _ := b.Snapshot()
	d := b.Digest(e.h.Consumer, m.Key)
	var parts []string
	var args []any
	for _, s := range starts {
		parts = append(parts, "(SELECT fingerprint FROM "+bucket.Name(b.Table, s)+" WHERE d = ? AND fingerprint IS NOT NULL LOCK IN SHARE MODE)")
		args = append(args, d[:])
	}
	if b.Legacy.Load() {
		parts = append(parts, "(SELECT fingerprint FROM "+b.Table+" WHERE consumer = ? AND idem_key = ? AND fingerprint IS NOT NULL)")
		args = append(args, e.h.Consumer, m.Key)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	var f []byte
	err := tx.QueryRowContext(ctx, strings.Join(parts, " UNION ALL ")+" LIMIT 1", args...).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, engine.StatementError(ctx, e.b.D, err)
	}
	return f, nil
}
