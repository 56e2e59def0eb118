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
// exactly: ids are compared byte for byte, never by hash alone. Concurrent
// calls with the same id accept it once. Memory is bounded by arrival rate ×
// window (the live ids), is released as ids expire, and can be capped with
// [WithMaxEntries]; a full Dedup refuses new ids with [ErrFull] from
// [Dedup.Add] instead of evicting live ones, because an evicted id's
// duplicate would be let through.
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
// producer retry that straddles the restart is let through. Where that
// matters, pair the window with a durable check downstream (an inbox, a
// key store, sequence marks) or persist ids in the store instead.
//
// Nothing here starts a goroutine. Expired ids are dropped from the front
// of an arrival-ordered ring by the calls themselves; [Dedup.Expire] does
// it without recording anything.
package window
