package redisstore

import "strings"

// A key is one string value: six MessagePack values one after the other,
// written and read by Redis's built-in cmsgpack library:
//
//	[state, token, expires, nonce, fingerprint, result]
//
// with state 1 in progress or 2 done; token the fencing token; expires the
// lease or result expiry in ms since the epoch by Redis's TIME; nonce the
// reserving call's (in progress only, else ""); fingerprint ("" when none);
// result (done only, else ""). A string, rather than a hash of fields, is
// written with its expiry in one SET … PX and read with one GET: the
// new-key path costs Redis four calls (TIME, GET, INCR, SET) instead of five,
// none of them building a hash.
//
// The PX expiry is at expires for a result; for a lease, at expires plus a
// grace of the lease again but at least a minute, so that an abandoned lease
// stays visible for a while and its successor learns that it is a takeover.
// Every script sets the PX expiry in the same atomic step as the write, so no
// crash or lost reply can leave a key that never expires. Tokens come from a
// counter key per bucket of a scope (see WithBuckets), in the same Cluster
// slot as the bucket's keys. Lua numbers are doubles: times in ms and tokens
// (microseconds since 1970, about 2^51) are exact.

// reserveScript: KEYS[1] key, KEYS[2] token counter; ARGV fingerprint ("" =
// none), lease ms, nonce. Returns one string, "code token expires takeover "
// followed by the stored result (done only), with code 0 acquired, 1 in
// progress, 2 done, 3 fingerprint mismatch: a flat string costs the client
// one allocation to read, where a five-element array costs seven.
//
// The nonce makes a Reserve that go-redis retries after a lost reply answer
// Acquired again, instead of finding its own lease "in progress".
var reserveScript = newScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('GET', KEYS[1])
local takeover = 0
if v then
	local s, tok, e, n, f, r = cmsgpack.unpack(v)
	if e > now then
		if s == 1 and n == ARGV[3] then
			return string.format('0 %d %d 0 ', tok, e)
		end
		if ARGV[1] ~= '' and f ~= '' and f ~= ARGV[1] then
			return string.format('3 0 %d 0 ', e)
		end
		if s == 1 then
			return string.format('1 0 %d 0 ', e)
		end
		return string.format('2 0 %d 0 ', e) .. r
	end
	if s == 1 then
		takeover = 1
	end
end
-- The token is the counter plus one, or Redis's clock in microseconds if
-- that is higher, and is stored back. A counter that was lost (a restart
-- without persistence) or rolled back (a restart from an older snapshot, a
-- failover to a replica that lagged) is so overtaken by the clock: every
-- token issued before was at most the clock of its moment (Redis issues
-- far fewer than one token per microsecond per bucket), and that moment
-- has passed. A clock stepped back is covered by the counter, while the
-- counter survives. One call stores the clock and reads the old counter
-- (SET … GET); only a counter ahead of the clock is written again.
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
local c = redis.call('SET', KEYS[2], string.format('%d', token), 'GET')
if c then
	c = tonumber(c) + 1
	if c > token then
		token = c
		redis.call('SET', KEYS[2], string.format('%d', token))
	end
end
local lease = tonumber(ARGV[2])
local e = now + lease
redis.call('SET', KEYS[1], cmsgpack.pack(1, token, e, ARGV[3], ARGV[1], ''), 'PX', lease + math.max(lease, 60000))
return string.format('0 %d %d %d ', token, e, takeover)
`)

// completeScript: KEYS[1] key; ARGV token, result, ttl ms. Returns 1 when
// the claim's token holds the key (or completed it already), 0 otherwise.
// A completion publishes an empty message on the channel named KEYS[1],
// for waiters (notify.go): PUBLISH, or SPUBLISH in the Cluster variant.
var completeScript, completeScriptSharded = publishing(`
local v = redis.call('GET', KEYS[1])
if not v then
	return 0
end
local s, tok, e, n, f = cmsgpack.unpack(v)
if string.format('%d', tok) ~= ARGV[1] then
	return 0
end
if s == 2 then
	return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[1], cmsgpack.pack(2, tok, now + ttl, '', f, ARGV[2]), 'PX', ttl)
redis.call('PUBLISH', KEYS[1], '')
return 1
`)

// releaseScript: KEYS[1] key; ARGV token. Deletes the key if the token
// holds it in progress, and publishes as completeScript does; returns 1 if
// it did.
var releaseScript, releaseScriptSharded = publishing(`
local v = redis.call('GET', KEYS[1])
if not v then
	return 0
end
local s, tok = cmsgpack.unpack(v)
if s == 1 and string.format('%d', tok) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', KEYS[1], '')
	return 1
end
return 0
`)

// publishing returns src and its Cluster variant, in which PUBLISH is
// SPUBLISH: sharded pub/sub (Redis 7) delivers the message on the key's
// shard alone, where a plain PUBLISH is broadcast to every node.
func publishing(src string) (plain, sharded script) {
	return newScript(src), newScript(strings.ReplaceAll(src, "'PUBLISH'", "'SPUBLISH'"))
}
