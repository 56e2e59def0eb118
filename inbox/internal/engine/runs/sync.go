package runs

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bloom"
)

// Sync brings the cached run list up to the database's, inside q's
// transaction, reading into the filters the keys of runs it has not
// accounted for. It never holds the lock while it reads.
func (t *Tree) Sync(ctx context.Context, q engine.Querier) error {
	b := t.b
	rs := t
	row := func() *sql.Row { return q.QueryRowContext(ctx, runVersionSQL(b.Meta)) }
	if tx, ok := q.(*sql.Tx); ok {
		// Every transaction reads it: through the prepared statements.
		_, version := b.Snapshot()
		if st := b.TxStmt(ctx, tx, runVersionSQL(b.Meta), version); st != nil {
			row = func() *sql.Row { return st.QueryRowContext(ctx) }
		}
	}
	v, err := scanVersion(row())
	if err != nil {
		return fmt.Errorf("inbox: read the run list version: %w", err)
	}
	for {
		rs.mu.Lock()
		if v == rs.version {
			rs.mu.Unlock()
			return nil
		}
		old, oldVersion := rs.runs, rs.version
		rs.mu.Unlock()
		all, err := listRuns(ctx, q, b.Table)
		if err != nil {
			return fmt.Errorf("inbox: list run tables: %w", err)
		}
		read := map[int64][][16]byte{}
		for s, list := range all {
			for _, r := range list {
				if accounted(old[s], r) {
					continue
				}
				ds, err := readDigests(ctx, q, runName(b.Table, s, r))
				if err != nil {
					return err
				}
				read[s] = append(read[s], ds...)
			}
		}
		rs.mu.Lock()
		if rs.version != oldVersion {
			rs.mu.Unlock()
			continue // another goroutine installed a list meanwhile
		}
		for s := range rs.filters {
			if len(all[s]) == 0 {
				t.dropFilterLocked(s) // the bucket was dropped
			}
		}
		for s, ds := range read {
			t.addToFilterLocked(s, ds, len(old[s]) == 0)
		}
		rs.runs, rs.version = all, v
		rs.mu.Unlock()
		return nil
	}
}

// addToFilterLocked adds ds to bucket s's filter, creating it when fresh
// (the bucket had no runs), within the memory budget; beyond it the bucket
// has none and is looked up directly.
func (t *Tree) addToFilterLocked(s int64, ds [][16]byte, fresh bool) {
	f := t.filters[s]
	var before int64
	if f == nil {
		if !fresh && len(t.runs[s]) > 0 {
			return // has runs not in any filter: stays unfiltered
		}
		f = &runFilter{}
		if t.expect > 0 {
			c := t.expect + t.expect/4
			f.parts, f.n, f.cap = []*bloom.Filter{newRunBloom(c)}, []int64{0}, []int64{c}
		}
		t.filters[s] = f
	} else {
		before = f.size()
	}
	for _, d := range ds {
		f.add(d)
	}
	t.b.RunBytes.Add(f.size() - before)
	if t.b.Host().FilterBytes <= 0 || t.b.RunBytes.Load() > t.b.Host().FilterBytes {
		t.dropFilterLocked(s)
	}
}

func (t *Tree) dropFilterLocked(s int64) {
	if f := t.filters[s]; f != nil {
		t.b.RunBytes.Add(-f.size())
		delete(t.filters, s)
	}
}

// readDigests reads every digest of a table, in digest order, a chunk of
// them as one hex string per query (a row apiece through database/sql costs
// more than the flush itself).
func readDigests(ctx context.Context, q engine.Querier, table string) ([][16]byte, error) {
	const chunk = 1 << 15
	var ds [][16]byte
	after := []byte{}
	for {
		var h sql.NullString
		err := q.QueryRowContext(ctx, `SELECT group_concat(h, '') FROM (SELECT hex(d) AS h FROM `+table+` WHERE d > ? ORDER BY d LIMIT `+strconv.Itoa(chunk)+`)`, after).Scan(&h)
		if err != nil {
			return nil, fmt.Errorf("inbox: read run %s: %w", table, err)
		}
		raw, err := hex.DecodeString(h.String)
		if err != nil || len(raw)%16 != 0 {
			return nil, fmt.Errorf("inbox: read run %s: digests of %d bytes: %v", table, len(raw), err)
		}
		for i := 0; i < len(raw); i += 16 {
			ds = append(ds, [16]byte(raw[i:i+16]))
		}
		if len(raw) < 16*chunk {
			return ds, nil
		}
		after = raw[len(raw)-16:]
	}
}

// Recorded returns those of ds recorded in a run, inside tx, after
// bringing the run list up to date.
func (t *Tree) Recorded(ctx context.Context, tx *sql.Tx, ds [][16]byte) (map[[16]byte]bool, error) {
	b := t.b
	if err := t.Sync(ctx, tx); err != nil {
		return nil, err
	}
	rs := t
	var q strings.Builder
	var args []any
	rs.mu.Lock()
	for s, list := range rs.runs {
		f := rs.filters[s]
		var hits []any
		for _, d := range ds {
			if f == nil || f.mayContain(d) {
				hits = append(hits, b.Param(d))
			}
		}
		if len(hits) == 0 {
			continue
		}
		ph := "?" + strings.Repeat(",?", len(hits)-1)
		for _, r := range list {
			if q.Len() > 0 {
				q.WriteString(" UNION ALL ")
			}
			q.WriteString("SELECT d FROM " + runName(b.Table, s, r) + " WHERE d IN (" + ph + ")")
			args = append(args, hits...)
		}
	}
	rs.mu.Unlock()
	if q.Len() == 0 {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, engine.StatementError(ctx, b.D, err)
	}
	found := map[[16]byte]bool{}
	if err := b.EachDigest(rows, func(d [16]byte) { found[d] = true }); err != nil {
		return nil, engine.StatementError(ctx, b.D, err)
	}
	return found, nil
}

// Tables returns the names of every run, for a fingerprint lookup.
func (t *Tree) Tables() []string {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for s, list := range t.runs {
		for _, r := range list {
			out = append(out, runName(t.b.Table, s, r))
		}
	}
	return out
}

// NoteInserted counts keys put into bucket s's hot table.
func (rs *Tree) NoteInserted(s int64, n int) {
	rs.mu.Lock()
	rs.pending[s] += n
	rs.mu.Unlock()
}

// Find looks the key of rec (its digest d, as bound) up in every run,
// after bringing the run list up to date, and fills rec when it is there.
func (t *Tree) Find(ctx context.Context, tx *sql.Tx, rec *engine.Record, d any) (bool, error) {
	if err := t.Sync(ctx, tx); err != nil {
		return false, err
	}
	for s, list := range t.runList() {
		for _, r := range list {
			name := runName(t.b.Table, s, r)
			ok, err := t.b.Row(ctx, tx, name, d, &rec.Fingerprint)
			if err != nil {
				return false, err
			}
			if ok {
				rec.Table, rec.Run, rec.Bucket = name, true, time.Unix(s, 0).UTC()
				return true, nil
			}
		}
	}
	return false, nil
}

// Forget deletes the key from its run and renames the run for its new
// key count (dropping it when empty), raising the run list's version: a
// run's name must count its keys, for merges and for other processes'
// filters (which re-read a run they have not accounted for).
func (t *Tree) Forget(ctx context.Context, tx *sql.Tx, rec engine.Record) (func(), error) {
	b := t.b
	s := rec.Bucket.Unix()
	rs := t
	rs.mu.Lock()
	v, list := rs.version+1, slices.Clone(rs.runs[s])
	rs.mu.Unlock()
	i := slices.IndexFunc(list, func(r run) bool { return runName(b.Table, s, r) == rec.Table })
	if i < 0 {
		return nil, engine.ErrBucketsChanged // the list changed since find: rerun
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM `+rec.Table+` WHERE d = ?`, b.Param(b.Digest(rec.Consumer, rec.Key)))
	if err != nil {
		return nil, engine.StatementError(ctx, b.D, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return nil, fmt.Errorf("inbox: forget key %q: %d rows deleted from %s, want 1: %w", rec.Key, n, rec.Table, errors.Join(err, engine.ErrBucketsChanged))
	}
	r := list[i]
	r.n--
	if r.n == 0 {
		_, err = tx.ExecContext(ctx, `DROP TABLE `+rec.Table)
		list = slices.Delete(list, i, i+1)
	} else {
		_, err = tx.ExecContext(ctx, `ALTER TABLE `+rec.Table+` RENAME TO `+runName(b.Table, s, r))
		list[i] = r
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: forget: rewrite run %s: %w", rec.Table, err)
	}
	if err := setRunVersion(ctx, tx, b.Meta, v); err != nil {
		return nil, fmt.Errorf("inbox: forget: %w", err)
	}
	// After the commit: the filter keeps the key (a false "maybe",
	// resolved by the lookup) and the list is the new one.
	return func() {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if rs.version == v-1 {
			runs := maps(rs.runs)
			if len(list) == 0 {
				delete(runs, s)
			} else {
				runs[s] = list
			}
			rs.runs, rs.version = runs, v
		}
	}, nil
}

// runList returns the cached run lists by bucket (replaced, never changed
// in place, so it may be read after the lock is released).
func (t *Tree) runList() map[int64][]run {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs
}
