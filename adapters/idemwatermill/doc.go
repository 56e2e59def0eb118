// Package idemwatermill is idem's deduplication for Watermill handlers: a
// message.HandlerMiddleware that applies each message's effect once, and
// never loses a message whose handler failed.
//
// Two middlewares, for two kinds of effect:
//
//   - [InboxMiddleware] (an [inbox.Inbox]): the effect is a write to the same
//     SQL database. The message's key and the effect commit in one
//     transaction, which the handler takes from its message's context with
//     [Tx]. Strongest: no window between effect and key.
//   - [Middleware] (a [keystore.Store]): the effect is elsewhere (an email,
//     a payment API). keystore.Do reserves the key in progress with a lease,
//     runs the handler, and completes the key only after the handler
//     succeeded; a failing handler releases the key, so the redelivery runs it
//     again. The handler's produced messages are stored with the key and
//     returned again for a duplicate.
//
// The key is msg.UUID by default, or a metadata field ([WithKeyMetadata]), or
// any function of the message ([WithKey]). It must be the same on every
// delivery of one logical message: a publisher that mints a new UUID on each
// retry defeats UUID keys, so key by a business id in that case.
//
//	store, _ := memstore.New()
//	dedup, err := idemwatermill.NewMiddleware(store)
//	if err != nil { ... }
//	router.AddConsumerHandler("charge", "orders", sub, charge).AddMiddleware(dedup.Middleware)
//
// # Why not Watermill's Deduplicator
//
// Watermill's middleware.Deduplicator records the key before the handler runs
// and keeps it when the handler fails. The router nacks the failed message,
// the broker redelivers it, the Deduplicator reports a duplicate, and the
// router acknowledges it: the message is lost, its effect never applied. Its
// default key is a 32-bit checksum of the payload, which reports distinct
// messages as duplicates. The tests of this package run both under
// Watermill's Router with the gochannel pubsub: with a handler that fails once,
// Watermill's applies the effect 0 times, idem's once.
//
// # What happens if the process dies
//
// InboxMiddleware: before COMMIT, nothing is recorded and the redelivery runs
// the handler; during COMMIT, the middleware returns the error (nack) and the
// redelivery finds the key if the commit landed; after COMMIT and before the
// ack, the redelivery is a duplicate and is acknowledged.
//
// Middleware: before the effect, the key is in progress until its lease
// expires, then the redelivery runs the handler; after the effect and before
// the key is completed, the redelivery runs the handler again once the lease
// expires (send the key downstream, as a Stripe Idempotency-Key or an email
// Message-ID, so that the repeat is absorbed there); after completion, the
// redelivery is acknowledged and the stored produced messages are returned.
//
// The rules are those of every idem adapter: a message that can never
// succeed (no key: an error wrapping idem.ErrMissingKey; an invalid key or
// fingerprint; a fingerprint mismatch; a handler error marked
// idem.Permanent) fails with an error marked idem.Permanent that names its
// [idem.Reason], and is nacked; route such errors to a poison queue
// (Watermill's middleware.PoisonQueueWithFilter with idem.IsPermanent)
// instead of redelivering them forever. Any other failure is returned as it
// is, and the redelivery runs the handler again. [WithObserver] sees every
// message's outcome; [WithTracer] makes each message a span linked to the
// producer's traceparent in its metadata.
//
// The middlewares start no goroutines and need no Close.
package idemwatermill
