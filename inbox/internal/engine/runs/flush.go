package runs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
)

// Maintain runs before a transaction: the first read of the run list,
// then a flush of the hot table this process filled, or the merge of a
// sealed bucket's runs into one. A failure is logged, not returned: the
// keys stay exact where they are, only slower to record.
func (t *Tree) Maintain(ctx context.Context) error {
	b := t.b
	rs := t
	rs.mu.Lock()
	first := rs.version < 0
	rs.mu.Unlock()
	if first {
		if err := t.h().ReadOnlyTx(ctx, func(tx *sql.Tx) error { return t.Sync(ctx, tx) }); err != nil {
			return err
		}
	}
	starts, _ := b.Snapshot()
	cur, ok := bucket.Target(starts, b.Current())
	rs.mu.Lock()
	var flush []int64
	for s, n := range rs.pending {
		switch {
		case s == cur && n >= FlushKeys:
			flush = append(flush, s)
		case s != cur && (b.Sealed(s) || !slices.Contains(starts, s)):
			flush = append(flush, s) // last flush and merge of a sealed bucket
		}
	}
	if len(flush) == 0 {
		for s, list := range rs.runs {
			if len(list) > 1 && b.Sealed(s) && slices.Contains(starts, s) {
				flush = append(flush, s)
				break
			}
		}
	}
	rs.mu.Unlock()
	if !ok && len(flush) == 0 {
		return nil
	}
	for _, s := range flush {
		if err := t.flush(ctx, s, s != cur); err != nil && ctx.Err() == nil {
			t.h().Logger.WarnContext(ctx, "inbox: flush of the hot table into a run failed; keys stay in the hot table", "bucket", bucket.Name(b.Table, s), "err", err)
		}
	}
	return nil
}

// flush, in one transaction, moves bucket s's hot rows into a new run
// and merges runs of a tier that is full; all of them into one when final
// (the bucket is sealed).
func (t *Tree) flush(ctx context.Context, s int64, final bool) error {
	b := t.b
	rs := t
	hot := bucket.Name(b.Table, s)
	return t.h().Retry(ctx, func() error {
		tx, err := t.h().DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		// A write first: the write lock, so the version read is the latest.
		if _, err := tx.ExecContext(ctx, `UPDATE `+b.Meta+` SET value = value WHERE name = '`+bucket.RunsMeta+`'`); err != nil {
			return err
		}
		if err := t.Sync(ctx, tx); err != nil {
			return err
		}
		ok, err := engine.TableExists(ctx, tx, b.D, hot)
		if err != nil {
			return err
		}
		rs.mu.Lock()
		v, list := rs.version+1, slices.Clone(rs.runs[s])
		rs.mu.Unlock()
		if !ok { // dropped by retention
			rs.mu.Lock()
			delete(rs.pending, s)
			rs.mu.Unlock()
			return tx.Commit()
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+hot).Scan(&n); err != nil {
			return err
		}
		var added [][16]byte
		changed := false
		if n > 0 && (final || n >= int64(FlushKeys/2)) {
			added, err = readDigests(ctx, tx, hot)
			if err != nil {
				return err
			}
			r := run{lo: v, hi: v, n: n}
			if err := writeRun(ctx, tx, b.Table, s, r, []string{hot}); err != nil {
				return err
			}
			runsStage("flush")
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+hot); err != nil {
				return err
			}
			list, changed = append(list, r), true
		}
		for {
			var drop []run
			list, drop = mergeTier(list, final)
			if len(drop) == 0 {
				break
			}
			changed = true
			m := list[len(list)-1]
			var from []string
			for _, d := range drop {
				from = append(from, runName(b.Table, s, d))
			}
			if err := writeRun(ctx, tx, b.Table, s, m, from); err != nil {
				return err
			}
			runsStage("merge")
			for _, f := range from {
				if _, err := tx.ExecContext(ctx, `DROP TABLE `+f); err != nil {
					return err
				}
			}
		}
		if !changed {
			rs.mu.Lock()
			if final {
				delete(rs.pending, s)
			} else {
				rs.pending[s] = 0
			}
			rs.mu.Unlock()
			return nil // rolled back: nothing to write
		}
		if err := setRunVersion(ctx, tx, b.Meta, v); err != nil {
			return err
		}
		runsStage("commit")
		if err := tx.Commit(); err != nil {
			// Only logged by Flush: the keys stay readable either way.
			return fmt.Errorf("inbox: commit of the flush of %s (outcome unknown): %w", hot, err)
		}
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if rs.version == v-1 {
			var total int64
			for _, r := range list {
				total += r.n
			}
			rs.expect = max(rs.expect, total)
			t.addToFilterLocked(s, added, len(rs.runs[s]) == 0)
			runs := maps(rs.runs)
			runs[s] = list
			rs.runs, rs.version = runs, v
		}
		if final {
			delete(rs.pending, s)
		} else {
			rs.pending[s] = 0
		}
		return nil
	})
}

// maps copies m (the run list is replaced, never changed in place, so a
// sync can compare against the list it started from).
func maps(m map[int64][]run) map[int64][]run {
	out := make(map[int64][]run, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// mergeTier finds one merge to do in list (ascending): the runs of the
// lowest full tier, or all of them when final. It returns the new list, the
// merged run last, and the runs it replaces; none when there is nothing to
// merge.
func mergeTier(list []run, final bool) ([]run, []run) {
	if final {
		if len(list) < 2 {
			return list, nil
		}
		return []run{merged(list)}, list
	}
	byTier := map[int][]run{}
	for _, r := range list {
		byTier[tier(r.n)] = append(byTier[tier(r.n)], r)
	}
	for t := 0; t <= 32; t++ {
		if rs := byTier[t]; len(rs) >= Fanout {
			var keep []run
			for _, r := range list {
				if !slices.Contains(rs, r) {
					keep = append(keep, r)
				}
			}
			return append(keep, merged(rs)), rs
		}
	}
	return list, nil
}

func merged(rs []run) run {
	m := run{lo: rs[0].lo, hi: rs[0].hi}
	for _, r := range rs {
		m.lo, m.hi, m.n = min(m.lo, r.lo), max(m.hi, r.hi), m.n+r.n
	}
	return m
}

// writeRun creates run r of bucket s and fills it, in digest order, from
// the tables from.
func writeRun(ctx context.Context, tx *sql.Tx, t string, s int64, r run, from []string) error {
	name := runName(t, s, r)
	if _, err := tx.ExecContext(ctx, `CREATE TABLE `+name+` (d BLOB PRIMARY KEY, fingerprint BLOB, idem_key TEXT) WITHOUT ROWID`); err != nil {
		return fmt.Errorf("inbox: create run %s: %w", name, err)
	}
	var q strings.Builder
	for i, f := range from {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString("SELECT d, fingerprint, idem_key FROM " + f)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO `+name+` (d, fingerprint, idem_key) `+q.String()+` ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("inbox: fill run %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != r.n {
		return fmt.Errorf("inbox: fill run %s: %d rows, want %d: %w", name, n, r.n, errors.Join(err, engine.ErrBucketsChanged))
	}
	return nil
}

// Drop drops, inside retention's transaction, the runs of bucket s.
func (t *Tree) Drop(ctx context.Context, tx *sql.Tx, s int64) error {
	if t == nil {
		return nil
	}
	b := t.b
	all, err := listRuns(ctx, tx, b.Table)
	if err != nil {
		return err
	}
	if len(all[s]) == 0 {
		return nil
	}
	for _, r := range all[s] {
		if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+runName(b.Table, s, r)); err != nil {
			return err
		}
	}
	v, err := runVersion(ctx, tx, b.Meta)
	if err != nil {
		return err
	}
	return setRunVersion(ctx, tx, b.Meta, v+1)
}
