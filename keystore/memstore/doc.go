// Package memstore is an exact, in-process [keystore.Store]: for tests,
// single-process services, and as a reference for the other stores.
//
// Exact means every key is kept until it expires, never approximated by a
// filter (completed keys without a result are kept as 96-bit keyed
// fingerprints, exact below the bound given under Memory), and never
// evicted while live: when the store holds its maximum
// number of keys ([WithMaxKeys]) and none has expired, Reserve returns
// [ErrFull] instead of forgetting a key whose effect could then run twice.
//
// Keys are spread over 64 shards by their keyed fingerprint (below), each
// with its own mutex;
// a call takes one shard lock, and no operation takes a global lock. Expired
// keys are reclaimed without a background goroutine: a key found expired
// is replaced on access; an insert into a shard that may hold expired keys
// deletes the expired ones among a few (8) of its entries; a full store
// scans for expired keys before answering ErrFull (each shard skipped
// unless its earliest expiry has passed); and [Store.Sweep] removes them all
// on request.
//
// # Memory
//
// A key completed with an empty result and no request fingerprint (what
// [keystore.Do] stores for a nil result) moves to a compact tier: a 96-bit
// keyed fingerprint of scope and key, its exact expiry and its exact
// fencing token, 16 bytes in expiry order (17 when a shard's keys complete
// out of the order they were reserved in: a byte of token skew) plus an
// index slot. The 64 shards' indexes grow by 1.5× at sizes offset by a
// 64th of a step each, so that they grow one after another and together
// hold a step's average, 7.0 bytes a key, instead of each peaking at once:
// 23.5 to 23.7 bytes a key at 10M keys, 24.3 at 1M (where the shards'
// partly filled chunks weigh more), 22.1 at 10M when sized up front with
// [WithCapacity] (no index then grows while the store fills to it),
// against 150.9 before issue 16, in memory the garbage collector does not
// scan; the tier drops expired keys from its front, a
// cheap step each call takes. While it is in progress such a key (reserved without a
// fingerprint) waits in a small per-shard open-addressing table by the
// same fingerprint, with its lease expiry, token and name (the caller's
// key string and the scope's, kept without a copy, for [Store.List] and
// Complete: 64 bytes a slot, slots reused, no allocation per key; the
// table grows at 3/4 full and shrinks below 1/8), and goes from there
// straight to the compact tier: a Reserve and an empty Complete never
// touch the map tier. Complete finds it by its token (a hint slot per
// token, checked against the slot's token, key and scope), so only
// Reserve hashes and validates the key. Filling a store that way (BenchmarkCompact)
// took 1.8 to 2.3× a Go map's insert in process CPU time at 10M keys (2×
// or less in four rounds of six, 605 to 731 ns a key), 2.0 to 2.6× at 1M
// (docs/benchmarks.md): two calls, each with a
// shard lock and a clock read, one key check and one SipHash (which picks
// the shard) in Reserve, plus one index cache miss and the index's growth
// a key. Reserve prefetches the key's index group as soon as it has the
// fingerprint (a prefetch instruction), so that the miss runs while it
// checks the key, locks the shard and reads the clock. Such keys are compared
// by fingerprint, not byte for byte, in progress and done: a new key is
// wrongly found in progress or completed with probability n/2⁹⁶ among n
// such keys (any pair collides with about n²/2⁹⁷: 6.3×10⁻¹² at 10⁹ keys),
// and the key, drawn from crypto/rand per store, keeps crafted keys from
// colliding on purpose. A completion whose expiry is earlier than the
// tier's newest (a shorter TTL after a longer one) goes to the map tier,
// as do keys reserved with a request fingerprint and keys completed with
// a result: about 160 bytes a key plus the result and fingerprint bytes.
// That tier is indexed by the same keyed fingerprint, in a map without
// pointers (which the garbage collector does not scan), and each entry
// holds its key, request fingerprint and result in one allocation; a
// lookup compares the key itself, so keys in the map tier are exact, a
// second key with the same fingerprint indexed by its name.
//
// # Operations
//
// The store renews leases ([Store.Extend], so [keystore.Do] keeps a slow
// effect's lease alive), and lets operators look at and steer keys
// ([Store.Inspect], [Store.List], [Store.Forget]) in every tier, except
// that List cannot name done keys of the compact tier, which keeps only
// their fingerprints; Inspect and Forget find them by name. A forgotten
// compact-tier key's record stays, ignored, until it expires (the tier
// deletes in expiry order only), and counts towards [WithMaxKeys] until
// then; the key, reserved again, completes into the map tier meanwhile.
//
// Leases and TTLs are measured by the store's clock, to the nanosecond:
// time.Now by default (its monotonic reading only, so wall-clock steps do
// not move them; read once per Reserve or Complete) or the function given
// to [WithClock]. Fencing tokens come from a counter per
// shard: a key always lives in the same shard, so its tokens strictly
// increase across Release and expiry. The counters start at the wall
// clock's Unix nanoseconds and step by 64, the number of shards, so that
// a token names the shard that handed it out (Complete and Release find a
// claim in progress by its token, without hashing the key again). A shard
// hands out far fewer than one token each 64 ns (each call holds its lock
// longer than that), so a store started later hands out larger tokens
// than any before it, restored from a snapshot or not, unless the wall
// clock was set back.
//
// # Crashes and snapshots
//
// Everything lives in the process: a crash forgets every key, in progress
// or done, so a redelivery after a restart runs the effect again, unless
// the process saved a snapshot ([Store.SaveSnapshot]: every tier and
// scope, leases, results, the fingerprint key and the token counters;
// versioned, CRC-32C checksummed, written to a temporary file and renamed
// into place, 32 bytes a compact-tier key) and starts from it ([Load],
// which refuses a damaged file with [ErrCorruptSnapshot]). Keys keep their
// wall-clock expiry across the restart, and each key lands in the shard it
// was in, since the fingerprint key that picks it is restored. What
// changed after the last snapshot is lost. `idem serve --store
// memory:PATH` saves every 30 seconds and on shutdown. Use sqlitestore,
// sqlstore or redisstore when no completed key may be lost.
package memstore
