package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/sqldialect"
)

// opsQueries sets the statements of Extend, Inspect, List and Forget of
// layout l, where match selects one key. A key is visible while it is in
// progress (live or lapsed, until a Reserve takes it over or Sweep deletes
// it) or done and not expired, by the database's clock.
func opsQueries(d sqldialect.Dialect, l Layout, match string, q *queries) {
	now, micros, size := nowSQLite, "expires_at", "length(result)"
	if d == sqldialect.Postgres {
		now, micros, size = "now()", pgMicros("expires_at"), "octet_length(result)"
	}
	live := "(state = 1 OR expires_at > " + now + ")"
	if d == sqldialect.Postgres {
		q.extend = `UPDATE {T} SET expires_at = now() + $4::bigint * interval '1 microsecond'
WHERE ` + match + ` AND token = $3 AND state = 1 RETURNING ` + micros
	} else {
		q.extend = `UPDATE {T} SET expires_at = ` + nowSQLite + ` + $4
WHERE ` + match + ` AND token = $3 AND state = 1 RETURNING expires_at`
	}
	q.inspect = `SELECT state, token, fingerprint, result, ` + micros + ` FROM {T}
WHERE ` + match + ` AND ` + live
	state := "$3"
	if d == sqldialect.Postgres {
		state = "$3::smallint"
	}
	// The page's cursor column, the key's column, and the range: the rows
	// layout pages by key after $2, the digest layout by digest from $2
	// over the names of the scope, [$1, $5).
	cursor, key, page, order := "idem_key", "idem_key", "scope = $1 AND idem_key > $2", "idem_key"
	if l == LayoutDigest {
		cursor, key, page, order = "d", "name", "name >= $1 AND name < $5 AND d >= $2", "d"
		if d == sqldialect.Postgres {
			cursor = "uuid_send(d)"
		}
	}
	q.list = `SELECT ` + cursor + `, ` + key + `, state, token, fingerprint, coalesce(` + size + `, 0), ` + micros + ` FROM {T}
WHERE ` + page + ` AND ` + live + ` AND (` + state + ` = 0 OR state = ` + state + `)
ORDER BY ` + order + ` LIMIT $4`
	q.forget = `DELETE FROM {T} WHERE ` + match + ` AND state = 2 AND expires_at > ` + now
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
	err := s.write(ctx, func(ctx context.Context, l *layout, x runner) error {
		lost = false
		err := x.queryRow(ctx, l.q.extend, s.args(l, c.Key, int64(c.Token), micros(lease)), &exp)
		if errors.Is(err, sql.ErrNoRows) {
			lost, err = true, nil
		}
		return err
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
		l, err := s.current(dctx)
		if err != nil {
			return err
		}
		err = runner{s: s}.queryRow(dctx, l.q.inspect, s.keyArgs(l, key), &state, &token, &fp, &result, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			notFound, err = true, nil
		}
		return s.changed(l, err)
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

// List implements [keystore.Inspector]: one SELECT in primary-key order
// after opts.After. In the rows layout the cursor is the last key
// returned; in the digest layout it is the hex of the last key's digest,
// and a page reads the primary key from there, keeping the rows of the
// store's scope (a scope with few of the table's keys reads more rows per
// page).
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
	var (
		out  []keystore.KeyInfo
		last []byte // the cursor column of the last row
		end  bool   // the cursor was the last digest: nothing follows
	)
	err = s.retry(dctx, func() error {
		out, last = out[:0], nil
		l, err := s.current(dctx)
		if err != nil {
			return err
		}
		args, ok, err := s.listArgs(l, opts.After, sqlState, opts.Limit)
		if err != nil || !ok {
			end = !ok
			return err
		}
		out, last, err = s.listPage(dctx, l, args)
		return s.changed(l, err)
	})
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("sqlstore: list: %w", err)
	case end || len(out) < opts.Limit:
		return out, "", nil
	case len(last) == 16:
		return out, hex.EncodeToString(last), nil
	}
	return out, out[len(out)-1].Key, nil
}

// listArgs are the arguments of layout l's list statement; ok is false
// when the cursor is the largest digest.
func (s *Store) listArgs(l *layout, after string, state, limit int) (args []any, ok bool, err error) {
	if l.q.layout == LayoutRows {
		return []any{s.scope, []byte(after), state, limit}, true, nil
	}
	var from [16]byte
	if after != "" {
		b, err := hex.DecodeString(after)
		if err != nil || len(b) != 16 {
			return nil, false, fmt.Errorf("cursor %q is not one that List returned for this table: %w", after, idem.ErrInvalidArgument)
		}
		// From the digest after the cursor's: add one to the 128-bit
		// big-endian number.
		copy(from[:], b)
		i := 15
		for ; i >= 0; i-- {
			if from[i]++; from[i] != 0 {
				break
			}
		}
		if i < 0 {
			return nil, false, nil
		}
	}
	lo := keyName(s.scope, "")
	hi := append(lo[:len(lo)-1:len(lo)-1], 1) // the scope and byte 1: past every name of the scope
	return []any{lo, s.param(from), state, limit, hi}, true, nil
}

// listPage runs the list statement.
func (s *Store) listPage(ctx context.Context, l *layout, args []any) ([]keystore.KeyInfo, []byte, error) {
	st, err := s.prep(ctx, l.q.list)
	if err != nil {
		return nil, nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var (
		out  []keystore.KeyInfo
		last []byte
	)
	skip := 0 // the name's scope and zero byte
	if l.q.layout == LayoutDigest {
		skip = len(s.scope) + 1
	}
	for rows.Next() {
		var (
			cursor, key []byte
			state       int16
			token, exp  int64
			fp          []byte
			size        int
		)
		if err := rows.Scan(&cursor, &key, &state, &token, &fp, &size, &exp); err != nil {
			return nil, nil, err
		}
		if len(key) < skip {
			return nil, nil, fmt.Errorf("row name %q is shorter than its scope %q", key, s.scope)
		}
		out = append(out, info(string(key[skip:]), state, token, fp, size, exp))
		last = cursor
	}
	if l.q.layout == LayoutRows {
		last = nil
	}
	return out, last, rows.Err()
}

// Forget implements [keystore.Forgetter]: one conditional DELETE of a done,
// unexpired row; tokens keep increasing (the sequence, or SQLite's counter
// row, is not touched).
func (s *Store) Forget(ctx context.Context, key string) error {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, l *layout, x runner) (err error) {
		n, err = x.exec(ctx, l.q.forget, s.keyArgs(l, key)...)
		return err
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
