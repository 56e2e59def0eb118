// Package idemnats connects NATS JetStream to idem: a [Publisher] that sets
// a stable Nats-Msg-Id so the stream's duplicate window drops producer
// retries, and a [Consumer] that applies each message through a
// transactional [inbox.Inbox] and acks it only after the commit.
//
// # Producer side
//
// [Publisher.Publish] sends a message with Nats-Msg-Id set to the id the
// caller gives: a stable id of the business event (an outbox row's id,
// [idem.DeriveKey] of business fields), never a fresh one per attempt.
// JetStream stores one message per id within the stream's duplicate window
// (StreamConfig.Duplicates, default 2 minutes, capped at MaxAge) and
// answers a repeat with PubAck.Duplicate and the original sequence, which
// Publish returns as [PubResult]. An attempt that gets no PubAck is retried
// with the same id ([WithPublishRetries]). The window is time-based and does not
// grow with duplicates: a retry after the window stores a second copy, which
// the consumer's inbox then absorbs.
//
// # Consumer side
//
// [NewConsumer] takes a pull consumer (AckExplicit), an inbox and a
// [Handler]. [Consumer.Run] pulls messages, groups those that are ready (up
// to [WithBatchSize]), and applies the group in one transaction with
// [inbox.Inbox.ProcessBatch]: each message's key and its handler's effect
// commit together, and a failing message rolls back alone. After the
// commit:
//
//   - applied or duplicate: Ack (or DoubleAck with [WithDoubleAck]);
//   - handler error: NakWithDelay, a jittered delay doubling from
//     [WithBackoff];
//   - handler error at the [WithMaxAttempts]-th delivery (the message's
//     NumDelivered), an error marked [idem.Permanent], or a fingerprint
//     mismatch: dead letter (below), with the [idem.Reason] every adapter
//     uses;
//   - the transaction itself failed (database down, commit outcome unknown):
//     every message of the group is nak'd with a delay and none is acked.
//     These failures do not count towards dead-lettering: the store, not the
//     message, is at fault (fail closed).
//
// With [WithSetHandler] a group is applied with a [SetHandler] instead,
// through [inbox.Inbox.ProcessBatchSet]: the keys are recorded with one
// multi-row insert and the set handler is called once with the messages
// whose keys were new, so a group costs a fixed number of statements. The
// Handler given to NewConsumer is the fallback: if the set handler fails,
// the group is run again message by message with the Handler, each in a
// savepoint, and each message is then settled as above (a poison message is
// nak'd and dead-lettered alone). Without a Handler, a failing set handler
// is treated like a failed transaction: the whole group is nak'd, nothing
// acked, nothing dead-lettered.
//
// The key is the Nats-Msg-Id header by default ([MsgIDKey]) or what
// [WithKey] derives from the message. A message with no usable key (no
// header, empty, longer than 255 bytes) cannot be deduplicated; it is
// dead-lettered at once with reason [idem.ReasonMissingKey] (or
// [idem.ReasonInvalidKey]) rather than applied without protection or
// redelivered forever. A handler that panics fails its message alone, like
// an error.
//
// Dead letter ([WithDeadLetter]): the message is republished, with its
// data and headers, to a subject captured by a stream, with Idem-Reason,
// Idem-Error, Idem-Key, Idem-Subject, Idem-Stream, Idem-Stream-Seq,
// Idem-Consumer and Idem-Num-Delivered headers, and then terminated
// (TermWithReason). Without a dead letter it is only terminated and logged.
// Keep the JetStream consumer's MaxDeliver at -1 (or above
// WithMaxAttempts), so that the server does not give up first.
//
// # What happens if the process dies
//
//   - Before the inbox commit: nothing is recorded. The messages are
//     redelivered after the consumer's AckWait and processed as new.
//   - During the commit: Run gets an error and acks nothing; the redelivery
//     finds the key if the commit landed (a Duplicate) or applies the
//     message.
//   - After the commit, before the ack (or with the ack lost on the wire):
//     the redelivery is a Duplicate; it is acked and the effect is not
//     repeated. This is the case the inbox exists for; the tests kill the
//     consumer exactly there.
//   - After the ack: done. The key stays in the inbox until swept; keep it
//     at least as long as the stream can redeliver (retention, consumer
//     resets).
//   - Between a dead letter's republish and its Term: the message is
//     redelivered and dead-lettered again with the same Nats-Msg-Id
//     ("dlq:<stream>:<seq>"), which the dead-letter stream's window drops.
//
// If the NATS connection drops, Run waits for the client to reconnect and
// pulls again; acks sent while disconnected are buffered by the client or
// lost, and a lost ack only costs a redelivery. If the connection is closed
// for good, Run returns an error wrapping [idem.ErrClosed]. If the server
// ends the pull for good (the consumer was deleted), Run returns an error
// that says why, wrapping jetstream.ErrConsumerDeleted or
// jetstream.ErrConsumerNotFound.
//
// Run receives messages with the client's Consume (pull requests kept open
// and renewed by the client) and gathers them into groups on a goroutine
// of its own; that goroutine, the settler's and the client's subscription
// are stopped before Run returns.
//
// # Without an inbox
//
// [NewWindowConsumer] is the same loop for an effect that is idempotent
// downstream and needs no database: a [DedupSet] (window/diskwindow's Set,
// a day of keys on one disk) answers which keys were applied within its
// horizon; the others run through a [WindowHandler], and their keys are
// recorded, durably, before they are acked. A failing set stops Run before
// any ack (fail closed).
package idemnats
