package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// opsQueries sets the statements of Extend, Inspect, List and Forget. A
// key is visible while it is in progress (live or lapsed, until a Reserve
// takes it over or Sweep deletes it) or done and not expired, by the
// database's clock.
func opsQueries(d sqldialect.Dialect, q *queries) {
	now, micros, size := nowSQLite, "expires_at", "length(result)"
	if d == sqldialect.Postgres {
		now, micros, size = "now()", "(extract(epoch FROM expires_at) * 1000000)::bigint", "octet_length(result)"
	}
	live := "(state = 1 OR expires_at > " + now + ")"
	if d == sqldialect.Postgres {
		q.extend = `UPDATE {T} SET expires_at = now() + $4::bigint * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND token = $3 AND state = 1 RETURNING ` + micros
	} else {
		q.extend = `UPDATE {T} SET expires_at = ` + nowSQLite + ` + $4
WHERE scope = $1 AND idem_key = $2 AND token = $3 AND state = 1 RETURNING expires_at`
	}
	q.inspect = `SELECT state, token, fingerprint, result, ` + micros + ` FROM {T}
WHERE scope = $1 AND idem_key = $2 AND ` + live
	state := "$3"
	if d == sqldialect.Postgres {
		state = "$3::smallint"
	}
	q.list = `SELECT idem_key, state, token, fingerprint, coalesce(` + size + `, 0), ` + micros + ` FROM {T}
WHERE scope = $1 AND idem_key > $2 AND ` + live + ` AND (` + state + ` = 0 OR state = ` + state + `)
ORDER BY idem_key LIMIT $4`
	q.forget = `DELETE FROM {T} WHERE scope = $1 AND idem_key = $2 AND state = 2 AND expires_at > ` + now
}

// Extend implements [keystore.Extender]: one conditional UPDATE on the
// claim's token, setting the lease to end lease from now by the database's
// clock.
func (s *Store) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateExtend(c, lease); err != nil {
		return keystore.Claim{}, err
	}
	var exp int64
	lost := false
	err := s.retry(ctx, func() error {
		return s.do(ctx, func(ctx context.Context, x runner) error {
			lost = false
			err := x.queryRow(ctx, s.q.extend, []any{s.scope, []byte(c.Key), int64(c.Token), micros(lease)}, &exp)
			if errors.Is(err, sql.ErrNoRows) {
				lost, err = true, nil
			}
			return err
		})
	})
	if err != nil {
		return keystore.Claim{}, fmt.Errorf("sqlstore: extend: %w", err)
	}
	if lost {
		return keystore.Claim{}, keystore.LeaseLostError("extend", c.Key, c.Token)
	}
	c.Expires = time.UnixMicro(exp)
	return c, nil
}

// info converts a row's columns to a KeyInfo.
func info(key string, state int16, token int64, fp []byte, size int, expires int64) keystore.KeyInfo {
	k := keystore.KeyInfo{Key: key, State: keystore.InProgress, Token: uint64(token), Expires: time.UnixMicro(expires), Fingerprint: keystore.HexFingerprint(fp)}
	if state == stDone {
		k.State, k.ResultSize = keystore.Done, size
	}
	return k
}

// Inspect implements [keystore.Inspector] with one SELECT.
func (s *Store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return keystore.KeyInfo{}, err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	var (
		state      int16
		token, exp int64
		fp, result []byte
		notFound   bool
	)
	err := s.retry(dctx, func() error {
		notFound = false
		err := runner{s: s}.queryRow(dctx, s.q.inspect, []any{s.scope, []byte(key)}, &state, &token, &fp, &result, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			notFound, err = true, nil
		}
		return err
	})
	switch {
	case err != nil:
		return keystore.KeyInfo{}, fmt.Errorf("sqlstore: inspect: %w", err)
	case notFound:
		return keystore.KeyInfo{}, keystore.NotFoundError(key)
	}
	k := info(key, state, token, fp, len(result), exp)
	if k.State == keystore.Done {
		k.Result = result
		if k.Result == nil {
			k.Result = []byte{}
		}
	}
	return k, nil
}

// List implements [keystore.Inspector]: one SELECT in key order (the primary
// key's), after opts.After; the cursor is the last key returned.
func (s *Store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	opts, err := keystore.ValidateList(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	sqlState := 0 // the state column's value, 0: any
	switch opts.State {
	case keystore.InProgress:
		sqlState = stInProgress
	case keystore.Done:
		sqlState = stDone
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	var out []keystore.KeyInfo
	err = s.retry(dctx, func() error {
		out = out[:0]
		st, err := s.prep(dctx, s.q.list)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(dctx, s.scope, []byte(opts.After), sqlState, opts.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				key        []byte
				state      int16
				token, exp int64
				fp         []byte
				size       int
			)
			if err := rows.Scan(&key, &state, &token, &fp, &size, &exp); err != nil {
				return err
			}
			out = append(out, info(string(key), state, token, fp, size, exp))
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: list: %w", err)
	}
	next := ""
	if len(out) == opts.Limit {
		next = out[len(out)-1].Key
	}
	return out, next, nil
}

// Forget implements [keystore.Forgetter]: one conditional DELETE of a done,
// unexpired row; tokens keep increasing (the sequence, or SQLite's counter
// row, is not touched).
func (s *Store) Forget(ctx context.Context, key string) error {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return err
	}
	var n int64
	err := s.retry(ctx, func() error {
		return s.do(ctx, func(ctx context.Context, x runner) (err error) {
			n, err = x.exec(ctx, s.q.forget, s.scope, []byte(key))
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("sqlstore: forget: %w", err)
	}
	if n == 1 {
		return nil
	}
	k, err := s.Inspect(ctx, key)
	switch {
	case err != nil:
		return err // not found, or the read failed
	case k.State == keystore.InProgress:
		return keystore.ForgetInProgressError(key)
	}
	return fmt.Errorf("sqlstore: forget %q: the key changed meanwhile; try again", key)
}
