package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/keystore"
)

var _ keystore.Extender = (*Store)(nil)

// extendScript: KEYS[1] key; ARGV token, lease ms. If the token holds the
// key in progress, sets its lease to end lease ms from now by Redis's TIME
// (the PX expiry with the same grace as Reserve's) and returns the new end;
// returns 0 otherwise. A lease that lapsed but was not taken over is still
// the token's: like Complete, Extend may renew it.
var extendScript = newScript(`
local v = redis.call('GET', KEYS[1])
if not v then
	return 0
end
local s, tok, e, n, f, r = cmsgpack.unpack(v)
if s ~= 1 or string.format('%d', tok) ~= ARGV[1] then
	return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
e = now + lease
redis.call('SET', KEYS[1], cmsgpack.pack(1, tok, e, n, f, r), 'PX', lease + math.max(lease, 60000))
return e
`)

// Extend implements [keystore.Extender] with one Lua script: the lease is
// set to end lease from now by Redis's clock, fenced on the claim's token
// (a taken-over, released or completed key gets ErrLeaseLost and is not
// touched). With [WithWaitReplicas], the renewal waits for the replicas
// like every write; an ErrNotReplicated renewal is on the master only, and
// the caller keeps counting from the old lease. If go-redis retries after
// a lost reply, the retry renews again, which is harmless.
//
// Crash: a renewal that did not land leaves the old lease to expire.
func (s *Store) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	if err := keystore.ValidateExtend(c, lease); err != nil {
		return keystore.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return keystore.Claim{}, fmt.Errorf("redisstore: extend: %w", err)
	}
	rkey := s.RedisKey(c.Key)
	cmd, err := eval(ctx, s, rkey, redis.NewIntCmd, extendScript, 1, rkey, strconv.FormatUint(c.Token, 10), millis(lease))
	if err != nil {
		return keystore.Claim{}, fmt.Errorf("redisstore: extend: %w", err)
	}
	if cmd.Val() == 0 {
		return keystore.Claim{}, keystore.LeaseLostError("extend", c.Key, c.Token)
	}
	c.Expires = time.UnixMilli(cmd.Val())
	return c, nil
}
