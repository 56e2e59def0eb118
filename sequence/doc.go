// Package sequence implements idempotent-producer sequence rules: what a
// Kafka broker (2.5 and later) decides when an idempotent producer's batch
// arrives, and the same idea turned around for consumers, who can recognise
// redeliveries with one high-water mark per producer instead of one key per
// message.
//
// # Producer side: Tracker
//
// An idempotent producer has a producer id and an epoch, and numbers the
// records it sends to each partition 0, 1, 2, … (wrapping from
// math.MaxInt32 to 0). [Tracker.Check] applies the broker's rules to a
// [Batch]:
//
//   - an exact retry of one of the last [CachedBatches] batches (same epoch,
//     same first and last sequence) is a duplicate: nothing is appended and
//     the original offset is returned, so the producer's retry succeeds;
//   - the next batch in sequence is appended at the partition's log end
//     offset;
//   - anything else is rejected with [*OutOfOrderError] (a gap, a partial
//     overlap, a retry of a batch no longer cached) or [ErrFenced] (an older
//     epoch), and changes no state;
//   - a producer the tracker does not know, or has forgotten after the idle
//     expiry (default 24 h), is accepted at any sequence (KIP-360).
//
// A lost acknowledgement, step by step: producer 7 sends sequence 5 to
// partition 2; the broker appends it at offset 0 and the acknowledgement is
// lost; the producer retries sequence 5; Check reports a duplicate with
// offset 0, and the log still holds one record. See the package example.
//
// # Consumer side: HighWater and SQLMarks
//
// When messages carry (producer, epoch, seq) (an idempotent Kafka producer's
// records, or an outbox relay that stamps them), a consumer can keep one mark
// per (producer, partition): the newest applied sequence. A message at or
// behind the mark is a redelivery; the mark's successor is applied; a
// message further ahead is a gap and is refused, because applying it would
// turn the missing message into a "duplicate" when it finally arrives.
// Memory is O(producers × partitions), whatever the message rate and however
// long duplicates can arrive, against one stored key per message for a key
// table (see the benchmarks and docs/choosing.md).
//
// [SQLMarks.Advance] moves a mark with one conditional upsert in the
// caller's transaction, the one that also holds the consumer's effect, so a
// mark never runs ahead of its effect. [HighWater] is the in-memory variant.
//
// # Crashes
//
// Tracker and HighWater keep their state in memory. A process that dies
// loses it: a fresh Tracker (or one restored from an older
// [Tracker.Snapshot]) treats the producers it does not know as new and
// accepts their next sequence whatever it is, exactly as a broker does after
// losing producer state, so a retry of a batch accepted after the snapshot
// is appended again. Snapshot after each change that must survive, or use
// SQLMarks, whose marks commit with the effects they guard. SQLMarks' marks
// never expire: an expired mark would accept redeliveries as new messages.
//
// Nothing here starts a goroutine; all types are safe for concurrent use.
package sequence
