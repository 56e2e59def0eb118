package bucketsql

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
	"github.com/idem-go/idem/sqldialect"
	"slices"
	"strconv"
	"strings"
)

// The bucketed layout's hot path. A batch's keys are recorded with one
// statement:
//
//	WITH v(d, f, k) AS (VALUES …)
//	INSERT INTO <current bucket> (d, fingerprint, idem_key)
//	SELECT d, f, k FROM v
//	WHERE NOT EXISTS (SELECT 1 FROM <other bucket> b WHERE b.d = v.d) AND …
//	ON CONFLICT (d) DO NOTHING RETURNING d
//
// The current bucket's primary key catches a concurrent duplicate in the
// same bucket; the NOT EXISTS probes find a key recorded in any other live
// bucket. What a probe cannot see is a concurrent, uncommitted insert of
// the same key into another bucket (two deliveries straddling a bucket
// boundary). SQLite runs one writer at a time, so there is none. On
// PostgreSQL every transaction first takes a transaction-scoped advisory
// lock on each key's digest, in a statement of its own: a second delivery
// waits for the first to commit or roll back, and its probes, run after
// the wait at READ COMMITTED, see the outcome. The locks are taken in
// digest order, so two batches never deadlock on them.

// Record records msgs[idx...] and returns the keys it recorded.
func (e *Engine) Record(ctx context.Context, tx *sql.Tx, msgs []engine.Message, idx []int) (map[string]bool, error) {
	b := e.b
	starts, version, cur, err := b.WriteTarget()
	if err != nil {
		return nil, err
	}
	ds := make([][16]byte, len(idx))
	keyOf := make(map[[16]byte]string, len(idx))
	for j, i := range idx {
		ds[j] = b.Digest(e.h.Consumer, msgs[i].Key)
		keyOf[ds[j]] = msgs[i].Key
	}
	if e.b.D == sqldialect.Postgres {
		if err := e.lockDigests(ctx, tx, ds); err != nil {
			return nil, err
		}
	}
	// Buckets with a lookup filter are looked up only for the keys the
	// filter may hold, before the insert; the others by the insert itself.
	var probe []int64
	filters := b.FiltersFor(starts)
	hits := map[int64][][16]byte{}
	for i, s := range starts {
		if s == cur {
			continue
		}
		if filters[i] == nil {
			probe = append(probe, s)
			continue
		}
		for _, d := range ds {
			if filters[i].MayContain(d) {
				hits[s] = append(hits[s], d)
			}
		}
	}
	recorded, err := e.lookupHits(ctx, tx, hits)
	if err != nil {
		return nil, err
	}
	if e.runs != nil {
		inRuns, err := e.runs.Recorded(ctx, tx, ds)
		if err != nil {
			return nil, err
		}
		for d := range inRuns {
			if recorded == nil {
				recorded = map[[16]byte]bool{}
			}
			recorded[d] = true
		}
	}
	if len(recorded) > 0 {
		keep, kept := idx[:0:0], ds[:0:0]
		for j, i := range idx {
			if !recorded[ds[j]] {
				keep, kept = append(keep, i), append(kept, ds[j])
			}
		}
		idx, ds = keep, kept
	}
	inserted := make(map[string]bool, len(idx))
	for lo := 0; lo < len(idx); lo += maxRowsPerInsert {
		hi := min(lo+maxRowsPerInsert, len(idx))
		q := e.insertSQL(e.h.KeyText, cur, probe, version, hi-lo)
		args := make([]any, 0, 3*(hi-lo)+1)
		for j := lo; j < hi; j++ {
			m := msgs[idx[j]]
			args = append(args, b.Param(ds[j]), engine.NullBytes(m.Fingerprint), m.Key)
		}
		if b.Legacy.Load() {
			args = append(args, e.h.Consumer)
		}
		// Not through the Inbox's statement cache: the text changes with
		// the bucket list, and stale statements would fill it. buckets
		// keeps its own, per list version.
		rows, err := b.TxQuery(ctx, tx, q, version, args)
		if err != nil {
			return nil, engine.StatementError(ctx, e.b.D, err)
		}
		if err := b.EachDigest(rows, func(d [16]byte) { inserted[keyOf[d]] = true }); err != nil {
			return nil, engine.StatementError(ctx, e.b.D, err)
		}
	}
	if e.runs != nil {
		e.runs.NoteInserted(cur, len(inserted))
	}
	return inserted, nil
}

// lookupHits looks up, in each filtered bucket, the digests its filter may
// hold, and returns those recorded there. One statement (a UNION ALL of one
// IN list per bucket) answers for every bucket: with many live buckets a
// batch's false "maybe"s are spread over most of them, and a round trip
// per bucket cost PostgreSQL half its rate at 30 buckets.
func (e *Engine) lookupHits(ctx context.Context, tx *sql.Tx, hits map[int64][][16]byte) (map[[16]byte]bool, error) {
	b := e.b
	starts := make([]int64, 0, len(hits))
	for s := range hits {
		starts = append(starts, s)
	}
	slices.Sort(starts) // one statement text per bucket set and sizes
	var found map[[16]byte]bool
	var q strings.Builder
	var args []any
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		rows, err := tx.QueryContext(ctx, q.String(), args...)
		q.Reset()
		args = args[:0]
		if err != nil {
			return engine.StatementError(ctx, e.b.D, err)
		}
		err = b.EachDigest(rows, func(d [16]byte) {
			if found == nil {
				found = map[[16]byte]bool{}
			}
			found[d] = true
		})
		if err != nil {
			return engine.StatementError(ctx, e.b.D, err)
		}
		return nil
	}
	for _, s := range starts {
		for ds := hits[s]; len(ds) > 0; {
			if len(args) >= maxLookupParams {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			part := ds[:min(len(ds), maxLookupParams-len(args))]
			ds = ds[len(part):]
			if len(args) > 0 {
				q.WriteString(" UNION ALL ")
			}
			q.WriteString("SELECT d")
			if b.D == sqldialect.Postgres {
				q.WriteString("::text")
			}
			q.WriteString(" FROM " + bucket.Name(b.Table, s) + " WHERE d IN (")
			for i, d := range part {
				if i > 0 {
					q.WriteByte(',')
				}
				args = append(args, b.Param(d))
				if b.D == sqldialect.Postgres {
					fmt.Fprintf(&q, "$%d::uuid", len(args))
				} else {
					q.WriteByte('?')
				}
			}
			q.WriteByte(')')
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return found, nil
}

// maxLookupParams bounds one lookup statement's parameters, under SQLite's
// 32,766 and PostgreSQL's 65,535.
const maxLookupParams = 30_000

// lockDigests takes PostgreSQL transaction-scoped advisory locks on 64
// bits of each digest, in order. Two keys sharing the 64 bits only wait on
// each other.
func (e *Engine) lockDigests(ctx context.Context, tx *sql.Tx, ds [][16]byte) error {
	ks := make([]int64, len(ds))
	for i, d := range ds {
		ks[i] = int64(binary.BigEndian.Uint64(d[8:]))
	}
	slices.Sort(ks)
	ks = slices.Compact(ks)
	var iso string
	var n int64
	err := tx.QueryRowContext(ctx, `SELECT current_setting('transaction_isolation'), count(pg_advisory_xact_lock(k)) FROM (SELECT unnest($1::bigint[]) AS k ORDER BY 1) s`, ks).Scan(&iso, &n)
	if err != nil {
		return fmt.Errorf("inbox: lock keys: %w", err)
	}
	if iso != "read committed" {
		// At REPEATABLE READ or SERIALIZABLE the probes would read the
		// snapshot taken before the lock wait, and miss the concurrent
		// first delivery they waited for.
		return fmt.Errorf("inbox: the bucketed layout needs READ COMMITTED transactions on PostgreSQL (this one is %s): use the rows layout, or the default isolation: %w", iso, engine.ErrUnsafeTable)
	}
	return nil
}

// insertSQL returns the statement recording n keys into bucket cur while
// looking them up in the buckets probe (those without a lookup filter) and
// in the frozen rows table, after a migration. probe is a function of the
// version (filters are added with a new version).
func (e *Engine) insertSQL(keyText bool, cur int64, probe []int64, version, n int) string {
	b := e.b
	ck := "i" + strconv.Itoa(n) + "/" + strconv.FormatInt(cur, 10) + "/" + strconv.FormatBool(keyText)
	if s, ok := b.CachedSQL(ck, version); ok {
		return s
	}
	// Plain ? on SQLite: numbered ?NNN parameters cost a name lookup each
	// on every bind (a third of the statement's CPU at 100 rows).
	ph := func(i int) string {
		if b.D == sqldialect.Postgres {
			return "$" + strconv.Itoa(i)
		}
		return "?"
	}
	var q strings.Builder
	q.WriteString("WITH v(d, f, k) AS (VALUES ")
	p := 1
	for i := 0; i < n; i++ {
		if i > 0 {
			q.WriteByte(',')
		}
		if i == 0 && b.D == sqldialect.Postgres {
			fmt.Fprintf(&q, "(%s::uuid, %s::bytea, %s::text)", ph(p), ph(p+1), ph(p+2))
		} else {
			fmt.Fprintf(&q, "(%s, %s, %s)", ph(p), ph(p+1), ph(p+2))
		}
		p += 3
	}
	k := "NULL"
	if keyText {
		k = "v.k"
	}
	q.WriteString(") INSERT INTO " + bucket.Name(b.Table, cur) + " (d, fingerprint, idem_key) SELECT v.d, v.f, " + k + " FROM v WHERE true")
	for _, s := range probe {
		o := bucket.Name(b.Table, s)
		q.WriteString(" AND NOT EXISTS (SELECT 1 FROM " + o + " WHERE " + o + ".d = v.d)")
	}
	if b.Legacy.Load() {
		// The consumer is the last argument.
		q.WriteString(" AND NOT EXISTS (SELECT 1 FROM " + b.Table + " WHERE " + b.Table + ".consumer = " + ph(p) + " AND " + b.Table + ".idem_key = v.k)")
	}
	q.WriteString(" ON CONFLICT (d) DO NOTHING RETURNING d")
	if b.D == sqldialect.Postgres {
		q.WriteString("::text")
	}
	return b.StoreSQL(ck, version, q.String())
}

// Fingerprint reads the fingerprint recorded for m's key in any live
// bucket (or the frozen rows table); nil when none is recorded.
func (e *Engine) Fingerprint(ctx context.Context, tx *sql.Tx, m engine.Message) ([]byte, error) {
	b := e.b
	starts, _ := b.Snapshot()
	var q strings.Builder
	args := []any{b.Param(b.Digest(e.h.Consumer, m.Key))}
	q.WriteString("SELECT f FROM (")
	for i, s := range starts {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString("SELECT fingerprint AS f FROM " + bucket.Name(b.Table, s) + " WHERE d = " + e.b.D.Placeholder(1))
		if e.b.D == sqldialect.SQLite {
			q.WriteString("1") // ?1
		}
	}
	for _, r := range e.runs.Tables() { // SQLite runs: synced by bucketInsert in this transaction
		q.WriteString(" UNION ALL SELECT fingerprint AS f FROM " + r + " WHERE d = ?1")
	}
	if b.Legacy.Load() {
		if len(starts) > 0 {
			q.WriteString(" UNION ALL ")
		}
		if e.b.D == sqldialect.Postgres {
			q.WriteString("SELECT fingerprint AS f FROM " + b.Table + " WHERE consumer = $2 AND idem_key = $3")
		} else {
			q.WriteString("SELECT fingerprint AS f FROM " + b.Table + " WHERE consumer = ?2 AND idem_key = ?3")
		}
		args = append(args, e.h.Consumer, m.Key)
	}
	q.WriteString(") x WHERE f IS NOT NULL LIMIT 1")
	var f []byte
	err := tx.QueryRowContext(ctx, q.String(), args...).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, engine.StatementError(ctx, e.b.D, err)
	}
	return f, nil
}
