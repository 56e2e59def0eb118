// Package redisstore is a [keystore.Store] on Redis (single node, Sentinel
// or Cluster) through github.com/redis/go-redis/v9.
//
// Each operation is one Lua script, run with EVALSHA (falling back to EVAL
// when Redis does not have it cached): atomic on the server, one round
// trip. A key is one string, six MessagePack values packed and unpacked by
// the scripts, at PREFIX{scope}:s:KEY; the scope is a Cluster hash tag, so
// a scope's keys and its token counter (PREFIX{scope}:t) share one slot and
// the scripts may touch both. [WithBuckets](n) spreads a scope over n tags
// (PREFIX{scope{b}:s:KEY, b a hash of the key, each bucket with its own
// counter), so that a busy scope uses every master of a Cluster while each
// script still touches one slot. Times are Redis's: TIME for the
// expiry reported in claims, and the key's PX expiry for the lease (plus a
// grace period, so that takeovers can be reported) or the result's TTL.
// Every script sets the expiry in the same step as the write, so no crash,
// timeout or lost reply can leave a key that never expires.
//
// Round trips: a store keeps at most [DefaultMaxInFlight] round trips to
// Redis in flight at once (see [WithMaxInFlight]). A call that finds a free
// slot goes out at once on its own goroutine, like any go-redis call, so a
// lone caller pays only a mutex; calls that find every slot busy wait, and the first round
// trip to end sends them together as one pipeline. Each is still its own
// atomic script on the server; what they share is the write, the read and
// the wake-ups, which on a busy host cost more than the scripts. At 64
// concurrent callers a store reserved 1.7 times as many keys per second as
// go-redis issued bare SET NX PX commands, on a two-core VM
// (docs/benchmarks.md). A store on a
// go-redis *AutoPipeliner leaves the batching to it.
//
// Redis unreachable: every call returns an error (fail closed) and writes
// nothing it could not have written atomically. A reply lost after the
// script ran leaves a lease that expires by itself; when go-redis retries
// the command (its MaxRetries), Reserve recognises its own lease by a
// per-call nonce and answers Acquired, and Complete treats a key already
// completed by the same token as success.
//
// Fencing tokens are max(counter + 1, Redis's TIME in µs), stored back in
// the bucket's counter. A counter that Redis loses (restart without
// persistence), or that goes back (restart from an older RDB, failover to
// a replica that lagged), is overtaken by the clock, so tokens never
// repeat nor go down as long as the clock of the node that serves a slot
// never lags behind the clock of the node that served it before by more
// than the restart or failover took (NTP-synchronised clocks, failovers of
// seconds).
//
// Durability is Redis's: with appendonly off, a Redis restart forgets keys
// and the effects run again on redelivery; with AOF fsync everysec, up to a
// second of completions may be lost. Replication is asynchronous, so a
// failover loses the writes its replica had not received: on a 6-node
// Cluster with replication cut for a second before kill -9 of a master,
// 233–405 acknowledged completions came back absent and their effects ran
// again. [WithWaitReplicas] (WAIT after each script) closes that window:
// 0 lost, 0 doubled, calls refused instead. min-replicas-to-write on the
// servers narrows it to the second or so the master takes to notice its
// replica is gone: 0 lost, 0–1 doubled in the same test (docs/scale.md). Pass the key downstream so that repeats are
// absorbed. [ClusterOptions] and [OpenURL] give go-redis the settings that
// keep a failover's outage to seconds.
package redisstore
