// Package window deduplicates message ids inside a fixed time window, by
// the rules NATS JetStream (Nats-Msg-Id, default window 2 minutes) and SQS
// FIFO queues (MessageDeduplicationId, 5 minutes) apply:
//
//   - an id is a duplicate iff it was first accepted in the same scope less
//     than the window ago: now − firstAccepted < W, so at exactly W it is
//     new again;
//   - duplicates do not extend the window: it stays anchored at the first
//     accept;
//   - a duplicate's answer carries the original's sequence number, as a
//     JetStream PubAck carries the stored message's sequence;
//   - scopes are independent: use the stream or queue name, or queue plus
//     message group for SQS's per-group scope;
//   - only the id counts, never the body; [ContentID] derives an id from a
//     body (SHA-256, as SQS content-based deduplication does) for producers
//     that send none.
//
// # Guarantees and limits
//
// Within one process, for ids whose window is open, [Dedup.Seen] answers
// exactly up to a stated bound. Ids are not compared byte for byte: each
// (scope, id) is reduced to a 96-bit fingerprint, the first 96 bits of
// SipHash-2-4-128 under a 128-bit key drawn from crypto/rand when the Dedup
// is made; an id written as a canonical UUID (36 characters, lowercase
// hex, 8-4-4-4-12) is instead parsed to its 16 bytes, XORed with a secret
// 128-bit mask of the scope and encrypted with AES-128 under a key derived
// from the same key (a permutation: distinct UUIDs in a scope get distinct
// 128-bit blocks; the argument is in internal/compact's documentation).
// Both paths keep the bound below. A new id is wrongly reported as a
// duplicate only if its fingerprint equals a live id's: probability n/2⁹⁶
// per call with n live ids, and for any pair among n live ids about
// n²/2⁹⁷: 6.3×10⁻¹² at 10⁹ live ids and 6.3×10⁻¹⁰ at 10¹⁰ (a Dedup holds
// at most 2³¹). Because the keys are secret and SipHash and AES are a PRF
// and a PRP, ids crafted to collide are no more likely to than random
// ones. (Before issue 16 the Dedup kept the id bytes and resolved 64-bit
// hash collisions exactly, at 102 bytes an id.)
// Concurrent calls with the same id accept it once. Memory is 21.8 to 24
// bytes a live id whatever the id's length (up to 0.2 more below a million
// ids, for the chunk directory and the newest chunk; up to 29.7 for the
// short while the index grows, see [Dedup]), is released as ids expire, and
// can be capped with [WithMaxEntries]; a full Dedup refuses new ids with
// [ErrFull] from [Dedup.Add] instead of evicting live ones, because an
// evicted id's duplicate would be let through. [WithCapacity] sizes the
// index for the ids a window holds (rate × window) from the start, as a
// map's size hint does: it never grows up to there (21.9 bytes an id when
// full, the index held from the start), and filling it costs what the
// steady state does.
//
// Measured beside a Go map[[16]byte]int64 in the same run (go test -bench
// Compact ./window, see bench_compact_test.go; 2 vCPU VM): see the table in
// docs/benchmarks.md, section "Compact in-memory dedup".
//
// A window is the right tool when duplicates can only arrive within a known
// horizon: producer retries after a timeout, a relay republishing after a
// crash. Choose W longer than that horizon; a duplicate arriving after W is
// accepted as new. It is not the right tool for consumer redeliveries that
// can come days later (an offset reset, a replay): use a key table or
// sequence marks, see docs/choosing.md.
//
// # Crashes
//
// A Dedup lives in memory. After a restart every id is new again, so a
// producer retry that straddles the restart is let through, unless the
// process saved a snapshot ([Dedup.SaveSnapshot]: versioned, CRC-32C
// checksummed, written to a temporary file and renamed into place) and
// loads it on start ([Dedup.LoadSnapshot], which refuses a corrupt or
// truncated file with [ErrCorruptSnapshot]). Ids accepted after the last
// snapshot are still forgotten; where that matters, pair the window with a
// durable check downstream (an inbox, a key store, sequence marks).
// For a window that survives kill -9 acknowledged id by acknowledged id,
// or that holds a day of ids (at under 8 bytes an id on disk and 1 in
// memory), use [github.com/idem-go/idem/window/diskwindow] instead.
//
// # Batches
//
// [Dedup.AddBatch] answers many ids in one call, as Add would one by one:
// each group of 16 is fingerprinted outside the lock and answered under one
// lock acquisition, after their index cache lines are loaded together, so
// their cache misses overlap. Consumers that fetch messages in batches
// (JetStream pull consumers, SQS receives of up to 10) should use it.
//
// Nothing here starts a goroutine. Expired ids are dropped from the front
// of an arrival-ordered ring by the calls themselves; [Dedup.Expire] does
// it without recording anything.
package window
