// Package idemamqp connects RabbitMQ (AMQP 0-9-1, amqp091-go) to idem: a
// [Publisher] with publisher confirms that sets the message-id property to
// a stable id, and a [Consumer] that applies each delivery through a
// transactional [inbox.Inbox] and acks it only after the commit.
//
// # Producer side
//
// [Publisher.Publish] puts its channel in confirm mode, sets message-id to
// the id the caller gives (a stable id of the business event, never a fresh
// one per attempt) and waits for the broker's basic.ack. RabbitMQ does not
// deduplicate: a publish retried after a lost confirm can be stored twice.
// The consumer's inbox, keyed by message-id, turns the second copy into a
// duplicate; the stable id is what makes the retry safe.
//
// # Consumer side
//
// [Consumer.Run] opens a channel with basic.qos ([WithPrefetch]) and
// consumes with manual acks. Deliveries that are ready (up to
// [WithBatchSize], waiting at most [WithLinger] for more) are applied in one
// transaction with [inbox.Inbox.ProcessBatch]: each delivery's key and its
// handler's effect commit together, and a failing delivery rolls back alone.
// After the commit:
//
//   - applied or duplicate: acked (one basic.ack with multiple=true when
//     the whole group succeeded);
//   - handler error: retried (below);
//   - handler error at attempt [WithMaxAttempts], an error marked
//     [idem.Permanent], a fingerprint mismatch, or no key: dead-lettered,
//     with the [idem.Reason] every adapter uses;
//   - the transaction itself failed (database down, commit outcome unknown):
//     none is acked; after a pause ([WithBackoff]) the group is nacked with
//     requeue=true.
//     This does not count as an attempt: the store, not the message, is at
//     fault (fail closed).
//
// With [WithSetHandler] a group is applied with a [SetHandler] instead,
// through [inbox.Inbox.ProcessBatchSet]: the keys are recorded with one
// multi-row insert and the set handler is called once with the deliveries
// whose keys were new, so a group costs a fixed number of statements. The
// Handler given to NewConsumer is the fallback: if the set handler fails,
// the group is run again delivery by delivery with the Handler, each in a
// savepoint, and each delivery is then settled as above (a poison delivery
// is retried and dead-lettered alone). Without a Handler, a failing set
// handler is treated like a failed transaction: the whole group is nacked
// with requeue after a pause, nothing acked, no attempt counted.
//
// The key is the message-id property by default ([MessageIDKey]), or what
// [WithKey] derives. A delivery without a usable key cannot be
// deduplicated: it is dead-lettered at once with [idem.ReasonMissingKey]
// (or [idem.ReasonInvalidKey]). A handler that panics fails its delivery
// alone, like an error.
//
// # Counting attempts: x-idem-attempts
//
// A classic queue keeps no delivery count: basic.nack with requeue=true
// only sets the redelivered flag, and x-death is written only when the
// broker dead-letters a message. So the Consumer counts attempts itself:
// on a handler error it republishes the delivery (body, properties,
// headers) to the same queue through the default exchange with the
// x-idem-attempts header incremented, waits for the confirm, and then acks
// the original. At the limit it dead-letters instead. Consequences: a
// retried delivery goes to the back of the queue (ordering is not kept for
// failing messages), and retries are immediate (for a delay, put a TTL
// retry queue in front). If the process dies between the republish and the
// ack, both copies exist with the same message-id and the inbox applies
// one. A process that crashes inside the handler does not count an attempt
// (the broker requeues with redelivered=true): such a message is retried
// until the crash is fixed, never dropped.
//
// Dead letter: with [WithDeadLetter] the delivery is published
// (confirmed) to that exchange with x-idem-reason, x-idem-error,
// x-idem-key, x-idem-queue, x-idem-exchange, x-idem-routing-key and
// x-idem-attempts headers, and then acked. Without it, the delivery is
// nacked with requeue=false, which the broker routes to the queue's own
// x-dead-letter-exchange (with x-death) if the queue has one, and drops
// otherwise. If the dead-letter publish fails, the delivery is requeued,
// never dropped.
//
// # What happens if the process dies
//
//   - Before the inbox commit: nothing is recorded. The channel closes, the
//     broker requeues the unacked deliveries, and they are processed.
//   - During the commit: Run acks nothing; the redelivery finds the key if
//     the commit landed (a Duplicate) or applies the delivery.
//   - After the commit, before the ack: the redelivery is a Duplicate; it is
//     acked and the effect is not repeated (tested by closing the
//     connection exactly there).
//   - After the ack: done. Keep inbox keys at least as long as a message can
//     come back (queue TTLs, replays from a dead-letter queue).
//
// amqp091-go does not reconnect. When the channel or connection closes, Run
// returns an error wrapping [idem.ErrClosed]; dial again and call Run again. Run
// closes the two channels it opened (consume, and confirm-mode publish for
// retries and dead letters) before it returns.
package idemamqp
