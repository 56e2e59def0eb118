// Package idem turns at-least-once delivery into effectively-once results.
//
// Brokers, relays and retrying clients deliver a message or a request one or
// more times. idem loses none of them and documents what happens if the
// process dies between any two steps. Inside the database (package inbox)
// the key and the effect commit in one transaction, so the effect is applied
// once per key while the key is kept. Outside it (package keystore) the
// effect runs at most once per lease, and a crash between the effect and
// Complete can repeat it once, after the lease ends; pass the key downstream
// so that the repeat is absorbed there.
//
// # The rules every idem component keeps
//
//  1. Never record a key before its effect commits. Either the key and the
//     effect commit in one transaction (package inbox), or the key is
//     reserved in progress with a lease and completed only after the effect
//     (package keystore). A crash between two steps leaves the system where a
//     redelivery does the right thing.
//  2. Duplicates are outcomes, not errors. applied == false is a normal
//     result; the caller acknowledges the message.
//  3. Fail closed. If the dedup store cannot answer, the work is not done and
//     the message must not be acknowledged.
//  4. Keys are always scoped (consumer, tenant, endpoint). The same key in
//     two scopes is two keys.
//  5. Store clocks, not client clocks: timestamps and leases are measured by
//     the store (now() in SQL) where one exists.
//  6. The same key with a different payload is a bug surfaced, not silently
//     absorbed: an optional fingerprint is stored with the key, and a
//     mismatch is [ErrFingerprintMismatch].
//  7. Keys are retained at least as long as a duplicate can arrive (broker
//     retention, redelivery window, client retry horizon), and cleanup runs
//     in bounded, indexed batches.
//  8. Every goroutine has an owner and a stop.
//
// # Glossary
//
//   - Key: the identity of one logical operation. Every retry of that
//     operation must carry the same key; see [DeriveKey].
//   - Scope: the namespace a key lives in (for the inbox, the consumer name).
//   - Effect: the business change the message asks for.
//   - Fingerprint: a digest of the payload stored beside the key, used to
//     detect a key reused for a different operation.
//   - Duplicate horizon: the longest time after the first delivery at which a
//     duplicate can still arrive.
//
// This package holds what the other packages share: key derivation, the
// sentinel errors that callers branch on across packages, and [Permanent].
// See docs/guarantees.md for what each API does under crashes.
package idem
