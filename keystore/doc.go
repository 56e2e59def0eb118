// Package keystore records idempotency keys for effects that cannot share a
// transaction with the key: an email, a call to a payment API, a message to
// another system. (When the effect is a write to the same database, use
// package inbox instead: key and effect in one transaction is stronger.)
//
// A key is reserved in progress with a lease before the effect, and
// completed with the effect's result only after it:
//
//	absent ──Reserve──► in progress (lease, token) ──Complete──► done (result, TTL)
//	   ▲                    │    │                                   │
//	   └──────Release───────┘    └─ lease expires: next Reserve      └─ TTL ends:
//	                                takes over with a higher token      absent again
//
// [Store.Reserve] answers Acquired (run the effect), InProgress (someone
// else is running it) or Done (here is its result); duplicates are outcomes,
// not errors. [Do] wraps the protocol around a function:
//
//	res, replayed, err := keystore.Do(ctx, store, key, fingerprint, func(ctx context.Context) ([]byte, error) {
//		return chargeCard(ctx, key) // the provider deduplicates on key too
//	})
//
// # Guarantees
//
//   - At most one live holder per key: a lease is granted only when the key
//     is absent or its lease or result has expired, atomically, by the
//     store's clock (now() in SQL, TIME and PX in Redis), not the caller's.
//   - Fencing: a key's tokens strictly increase over its whole life, across
//     Release, expiry and sweeping. Complete and Release with any token but
//     the current one return ErrLeaseLost and write nothing, so a holder
//     that stalled past its lease cannot overwrite its successor's result.
//   - Nothing blocks forever: every lease expires, including after a crash,
//     a lost reply or bad input; Release makes the key reservable at once.
//   - Fail closed: when the store cannot answer, Reserve returns an error,
//     and the effect must not run nor the message be acknowledged.
//   - Fingerprints: a key reused with another payload's fingerprint is
//     idem.ErrFingerprintMismatch, and the stored record is untouched.
//   - Scopes: stores implementing [Scoper] keep keys of different scopes
//     (consumer, tenant, endpoint) apart; the same key in two scopes never
//     collides and no scope reads another's results.
//   - Keep-alive: with a store implementing [Extender], Do (and idemhttp,
//     idemgrpc, through [KeepAlive]) renews the lease every third of its
//     length while the effect runs, fenced by the token, so an effect that
//     outlives its lease does not run twice; a lease lost anyway cancels
//     the effect's context with a cause wrapping ErrLeaseLost; a dead
//     holder's key is free one lease after its last renewal.
//
// # Operations
//
// Stores implementing [Inspector] and [Forgetter] let operators list keys
// by state, look at one ([KeyInfo]: state, token, expiry, fingerprint,
// result size), free a stuck one with a fenced [ReleaseToken], and delete
// a done one. The idem command's "keys" subcommand and idem serve's admin
// API use them; docs/operations.md is the runbook.
//
// What no store can close is the window between the effect and Complete: if
// the process dies there, the key stays in progress until its lease expires
// and the effect then runs again. Send the key downstream (Stripe's
// Idempotency-Key header, an email's Message-ID, the fencing token from
// [ClaimFrom]) so that the repeat is absorbed there. docs/keystore.md has
// the full crash table and how to choose lease and TTL.
//
// # Implementations
//
// memstore (in-process, exact, bounded), sqlstore (a table on PostgreSQL
// or SQLite; sqlitestore opens a SQLite file with its checkpointer),
// redisstore, natsstore and dynamostore (modules of their own, on the Redis
// and NATS clients and the AWS SDK); keystoreprom wraps any of them with
// Prometheus metrics. storetest.RefStore is a small reference store for
// tests.
// Every implementation passes the conformance suite in package storetest,
// including a linearizability check of random concurrent histories.
package keystore
