package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/keystore"
)

var (
	_ keystore.Inspector = (*Store)(nil)
	_ keystore.Forgetter = (*Store)(nil)
)

// inspectScript: KEYS the keys to read (one slot); ARGV[1] '1' to return
// results too. Returns, per key, "" when absent, else "state token expires
// resultLen fpLen " followed by the fingerprint and (when asked) the
// result. Read-only.
var inspectScript = newScript(`
local out = {}
for i, k in ipairs(KEYS) do
	local v = redis.call('GET', k)
	if v then
		local s, tok, e, n, f, r = cmsgpack.unpack(v)
		out[i] = string.format('%d %d %d %d %d ', s, tok, e, #r, #f) .. f
		if ARGV[1] == '1' then
			out[i] = out[i] .. r
		end
	else
		out[i] = ''
	end
end
return out
`)

// forgetScript: KEYS[1] key. Deletes a done key; returns 0 absent, 1 in
// progress (not deleted), 2 deleted.
var forgetScript = newScript(`
local v = redis.call('GET', KEYS[1])
if not v then
	return 0
end
local s = cmsgpack.unpack(v)
if s == 1 then
	return 1
end
redis.call('DEL', KEYS[1])
return 2
`)

// parseInfo reads one entry of the inspect script's reply.
func parseInfo(key, v string) (keystore.KeyInfo, bool, error) {
	if v == "" {
		return keystore.KeyInfo{}, false, nil
	}
	rest := v
	var f [5]int64
	for i := range f {
		field, tail, ok := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if !ok || err != nil {
			return keystore.KeyInfo{}, false, fmt.Errorf("%w: %q", errReply, v)
		}
		f[i], rest = n, tail
	}
	if f[4] < 0 || f[4] > int64(len(rest)) {
		return keystore.KeyInfo{}, false, fmt.Errorf("%w: %q", errReply, v)
	}
	k := keystore.KeyInfo{Key: key, Token: uint64(f[1]), Expires: time.UnixMilli(f[2]), Fingerprint: keystore.HexFingerprint([]byte(rest[:f[4]]))}
	switch f[0] {
	case 1:
		k.State = keystore.InProgress
	case 2:
		k.State, k.ResultSize = keystore.Done, int(f[3])
		if len(rest) > int(f[4]) || f[3] == 0 {
			k.Result = []byte(rest[f[4]:])
		}
	default:
		return keystore.KeyInfo{}, false, fmt.Errorf("%w: %q", errReply, v)
	}
	return k, true, nil
}

// Inspect implements [keystore.Inspector] with one read-only script. The
// token of a done key is the one that completed it. A lapsed lease stays
// visible for its grace (the lease again, at least a minute).
func (s *Store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return keystore.KeyInfo{}, err
	}
	rkey := s.RedisKey(key)
	cmd, err := eval(ctx, s, rkey, redis.NewStringSliceCmd, inspectScript, 1, rkey, "1")
	if err != nil {
		return keystore.KeyInfo{}, fmt.Errorf("redisstore: inspect: %w", err)
	}
	if len(cmd.Val()) != 1 {
		return keystore.KeyInfo{}, fmt.Errorf("redisstore: inspect: %w: %q", errReply, cmd.Val())
	}
	k, ok, err := parseInfo(key, cmd.Val()[0])
	switch {
	case err != nil:
		return keystore.KeyInfo{}, fmt.Errorf("redisstore: inspect: %w", err)
	case !ok:
		return keystore.KeyInfo{}, keystore.NotFoundError(key)
	}
	return k, nil
}

// bucketTag is the tag of bucket b of the store's scope (see tag).
func (s *Store) bucketTag(b int) string {
	if s.buckets == 1 {
		return s.base
	}
	return s.prefix + "{" + s.scope + "{" + strconv.Itoa(b) + "}:"
}

// globEscape escapes the glob characters of SCAN's MATCH.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// List implements [keystore.Inspector] with SCAN over the scope's keys,
// bucket by bucket (on a Cluster, on the master of each bucket's slot),
// and one read-only script per SCAN batch; one call runs at most
// listScans SCANs, so a page may hold fewer keys than the limit (or none)
// while more follow. The cursor is "bucket:scan-cursor[:skip]" (skip: keys
// of that SCAN batch already returned). As with SCAN, a key may appear
// twice in one listing if Redis rehashes meanwhile. SCAN walks the whole
// keyspace of each node, matching the scope's pattern: on a large Redis,
// list sparingly.
func (s *Store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	opts, err := keystore.ValidateList(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	bucket, cursor, skip, err := s.parseCursor(opts.After)
	if err != nil {
		return nil, "", err
	}
	dctx, cancel := keystore.Detach(ctx)
	defer cancel()
	var out []keystore.KeyInfo
	for range listScans {
		tag := s.bucketTag(bucket)
		node := redis.Cmdable(s.conn.rdb)
		if cc, ok := s.conn.rdb.(*redis.ClusterClient); ok {
			if node, err = cc.MasterForKey(dctx, tag+"t"); err != nil {
				return nil, "", fmt.Errorf("redisstore: list: %w", err)
			}
		}
		names, next, err := node.Scan(dctx, cursor, globEscape(tag)+"s:*", int64(max(opts.Limit, listCount))).Result()
		if err != nil {
			return nil, "", fmt.Errorf("redisstore: list: %w", err)
		}
		names = names[min(skip, len(names)):]
		infos, err := s.inspectAll(dctx, tag, names)
		if err != nil {
			return nil, "", err
		}
		for i, k := range infos {
			if k.State == 0 || opts.State != 0 && k.State != opts.State {
				continue
			}
			out = append(out, k)
			if len(out) == opts.Limit {
				if i+1 < len(infos) { // the rest of this batch comes next
					return out, fmt.Sprintf("%d:%d:%d", bucket, cursor, skip+i+1), nil
				}
				break
			}
		}
		cursor, skip = next, 0
		if cursor == 0 {
			if bucket++; bucket == s.buckets {
				return out, "", nil
			}
		}
		if len(out) == opts.Limit {
			break
		}
	}
	return out, fmt.Sprintf("%d:%d", bucket, cursor), nil
}

// List's SCAN work per call: at most listScans SCANs of COUNT listCount
// (or the limit, if larger).
const (
	listScans = 32
	listCount = 500
)

// parseCursor reads List's cursor.
func (s *Store) parseCursor(after string) (bucket int, cursor uint64, skip int, err error) {
	if after == "" {
		return 0, 0, 0, nil
	}
	f := strings.Split(after, ":")
	bad := len(f) < 2 || len(f) > 3
	if !bad {
		var e1, e2, e3 error
		bucket, e1 = strconv.Atoi(f[0])
		cursor, e2 = strconv.ParseUint(f[1], 10, 64)
		if len(f) == 3 {
			skip, e3 = strconv.Atoi(f[2])
		}
		bad = e1 != nil || e2 != nil || e3 != nil || bucket < 0 || bucket >= s.buckets || skip < 0
	}
	if bad {
		return 0, 0, 0, fmt.Errorf("%w: list cursor %q", idem.ErrInvalidArgument, after)
	}
	return bucket, cursor, skip, nil
}

// inspectAll reads the Redis keys names, all under tag, with one script;
// an absent key has State 0.
func (s *Store) inspectAll(ctx context.Context, tag string, names []string) ([]keystore.KeyInfo, error) {
	if len(names) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2+len(names))
	args = append(args, len(names))
	for _, n := range names {
		args = append(args, n)
	}
	args = append(args, "0")
	cmd, err := eval(ctx, s, names[0], redis.NewStringSliceCmd, inspectScript, args...)
	if err != nil {
		return nil, fmt.Errorf("redisstore: list: %w", err)
	}
	if len(cmd.Val()) != len(names) {
		return nil, fmt.Errorf("redisstore: list: %w: %d entries for %d keys", errReply, len(cmd.Val()), len(names))
	}
	out := make([]keystore.KeyInfo, len(names))
	for i, v := range cmd.Val() {
		k, _, err := parseInfo(strings.TrimPrefix(names[i], tag+"s:"), v)
		if err != nil {
			return nil, fmt.Errorf("redisstore: list: %w", err)
		}
		out[i] = k
	}
	return out, nil
}

// Forget implements [keystore.Forgetter] with one script.
func (s *Store) Forget(ctx context.Context, key string) error {
	if err := keystore.ValidateInspect(ctx, key); err != nil {
		return err
	}
	rkey := s.RedisKey(key)
	cmd, err := eval(ctx, s, rkey, redis.NewIntCmd, forgetScript, 1, rkey)
	if err != nil {
		return fmt.Errorf("redisstore: forget: %w", err)
	}
	switch cmd.Val() {
	case 0:
		return keystore.NotFoundError(key)
	case 1:
		return keystore.ForgetInProgressError(key)
	}
	return nil
}
