package redisstore

import "github.com/redis/go-redis/v9"

// A key is a hash with the fields
//
//	s  state: "1" in progress, "2" done
//	t  fencing token
//	e  lease or result expiry, ms since the epoch by Redis's TIME
//	f  fingerprint (absent when none)
//	r  result (done only)
//	n  the reserving call's nonce (in progress only)
//
// and a PX expiry: at e for a result; for a lease, at e plus a grace of the
// lease again but at least a minute, so that an abandoned lease stays
// visible for a while and its successor learns that it is a takeover. Every
// script sets the PX expiry in the same atomic step as the write, so no
// crash or lost reply can leave a key that never expires. Tokens come from
// a counter key per scope, in the same Cluster slot as the scope's keys.
// Lua numbers are doubles: times in ms and tokens (about 2^51) are exact.

// reserveScript: KEYS[1] key, KEYS[2] token counter; ARGV fingerprint ("" =
// none), lease ms, nonce. Returns one string, "code token expires takeover "
// followed by the stored result (done only), with code 0 acquired, 1 in
// progress, 2 done, 3 fingerprint mismatch: a flat string costs the client
// one allocation to read, where a five-element array costs seven.
//
// The nonce makes a Reserve that go-redis retries after a lost reply answer
// Acquired again, instead of finding its own lease "in progress".
const reserveSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 's', 't', 'e', 'f', 'r', 'n')
local takeover = 0
if r[1] then
	local e = tonumber(r[3])
	if e > now then
		if r[1] == '1' and r[6] == ARGV[3] then
			return string.format('0 %d %d 0 ', tonumber(r[2]), e)
		end
		local f = r[4] or ''
		if ARGV[1] ~= '' and f ~= '' and f ~= ARGV[1] then
			return string.format('3 0 %d 0 ', e)
		end
		if r[1] == '1' then
			return string.format('1 0 %d 0 ', e)
		end
		return string.format('2 0 %d 0 ', e) .. (r[5] or '')
	end
	if r[1] == '1' then
		takeover = 1
	end
end
-- A missing counter (INCR answers 1) restarts at the current time in
-- microseconds, so tokens keep increasing even if Redis lost the counter
-- (restart without persistence, failover): far more microseconds pass than
-- tokens are issued.
local token = redis.call('INCR', KEYS[2])
if token == 1 then
	token = tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1
	redis.call('SET', KEYS[2], token)
end
local lease = tonumber(ARGV[2])
local e = now + lease
if r[1] then
	redis.call('DEL', KEYS[1])
end
if ARGV[1] ~= '' then
	redis.call('HSET', KEYS[1], 's', '1', 't', token, 'e', e, 'n', ARGV[3], 'f', ARGV[1])
else
	redis.call('HSET', KEYS[1], 's', '1', 't', token, 'e', e, 'n', ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], lease + math.max(lease, 60000))
return string.format('0 %d %d %d ', token, e, takeover)
`

var reserveScript = redis.NewScript(reserveSrc)

// completeScript: KEYS[1] key; ARGV token, result, ttl ms. Returns 1 when
// the claim's token holds the key (or completed it already), 0 otherwise.
var completeScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 't')
if not r[1] or r[2] ~= ARGV[1] then
	return 0
end
if r[1] == '2' then
	return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 's', '2', 'r', ARGV[2], 'e', now + ttl)
redis.call('HDEL', KEYS[1], 'n')
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
`)

// releaseScript: KEYS[1] key; ARGV token. Deletes the key if the token
// holds it in progress; returns 1 if it did.
var releaseScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 't')
if r[1] == '1' and r[2] == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
return 0
`)
