// Package outbox is the transactional outbox: messages are written in the
// business transaction, and a relay publishes them afterwards.
//
// Publishing to a broker and committing a database transaction cannot be one
// atomic step. The outbox makes them two steps that are each atomic:
//
//  1. [Outbox.Add] inserts the outgoing message in the same transaction as
//     the business change. Both commit, or neither does: no message for a
//     change that rolled back, no change without its message.
//  2. A [Relay] reads committed, unsent messages, publishes them through a
//     [Publisher] and marks them sent, in one short transaction per batch.
//
// # What happens if the process dies
//
//   - Before the business transaction commits: no message, no change.
//   - After the commit, before the relay runs: the message waits in the
//     table; a relay publishes it later.
//   - After publishing, before the mark commits: the mark is rolled back, and
//     the message is published again with the same ID. The outbox is
//     at-least-once: the consumer absorbs the duplicate (inbox, the broker's
//     dedup window keyed by the ID, or sequence marks).
//
// Every message carries a stable ID (set by the caller, or a time-ordered
// random one assigned by Add), so every republication carries the same ID.
//
// # Order
//
// Messages with the same Key are published in the order of their outbox
// IDs, which is the order of the transactions that wrote them when those
// transactions serialize on the aggregate (they normally do: they update
// the same row). Several relays may run at once: on PostgreSQL each claims
// rows with FOR UPDATE SKIP LOCKED, and a relay skips a key whose earlier
// message another relay holds, so a key's messages never overtake each other.
// On SQLite relays serialize on the database's single writer lock, which a
// relay takes only when a message is waiting: an idle relay's poll is a read.
package outbox
