// Package dynamostore is a [keystore.Store] on one Amazon DynamoDB table,
// through github.com/aws/aws-sdk-go-v2/service/dynamodb. It is a module of
// its own, so that programs that do not use it get no AWS SDK.
//
// # One request per call
//
// Reserve, Complete, Release and [Store.Extend] are each one conditional
// UpdateItem. Reserve's condition is
//
//	attribute_not_exists(pk) OR st = released OR ex < now − skew
//
// and its update sets the lease and increments the fencing token in the
// same write (tok = if_not_exists(tok, now in µs) + 1). Complete, Release
// and Extend are conditional on tok = the claim's token AND st = in
// progress. Every one asks for ReturnValuesOnConditionCheckFailure ALL_OLD,
// so that when the condition fails DynamoDB returns the item as it was, and
// the store answers InProgress, Done, ErrFingerprintMismatch or
// ErrLeaseLost without a second read. (dynalite and older DynamoDB Local do
// not return it; then the store reads the item once with a strongly
// consistent GetItem.)
//
// # Item layout
//
// One item per key, partition key "{scope}key" (a string: scopes contain no
// '}' and neither scopes nor keys contain NUL, so no two pairs collide;
// at most 2+255+255 bytes, well inside DynamoDB's 2048-byte partition key,
// so keys are stored as they are, readable by operators, and not hashed).
// Attributes, with the default names of [DefaultAttributes]: st (1 in
// progress, 2 done, 3 released), tok, ex (lease or result end in ms since
// the epoch), ttl (seconds, for DynamoDB's TTL), n (a nonce, in progress
// only), fp (the fingerprint, when given), res (the result, when not
// empty). A done key with an empty result and no fingerprint is about 46
// bytes plus its key, one write unit ([ItemSize], [WriteUnits]).
//
// Release does not delete the item: it marks it released and keeps the
// token, so that the next holder's token is higher. Items are deleted by
// DynamoDB's TTL, which is lazy (it can lag by days): expiry is always
// decided by the item's ex, never by the item being gone. The ttl attribute
// is an hour (plus the skew margin) after ex, so that a lapsed lease is
// still seen, and reported as a takeover, for that long. A key whose item
// TTL deleted starts again from a token of the caller's clock in µs, higher
// than any token the old item had unless that caller's clock is more than
// the grace behind the clocks that wrote it.
//
// # Clocks
//
// DynamoDB has no server clock in conditions: leases and TTLs are measured
// by the clock of the caller, which writes ex and compares it with its own
// now. A lease granted by host A for L ends at A's clock + L. Host B takes
// it over only when B's clock is past that end plus the skew margin d
// ([WithClockSkew], default [DefaultClockSkew], one second). If B's clock is
// ahead of A's by s, B may take over s − d early: the lease is safe (A has
// all of L) while s < d, and when s > d the lease is shortened by s − d.
// Keep hosts on NTP (on AWS, the Amazon Time Sync Service keeps them well
// inside a millisecond) and d above the worst skew you accept; a larger d
// only makes an abandoned key wait d longer and a result live d longer.
// Claim.Expires is ex as written, by the writer's clock.
//
// # Failures
//
// Throttling (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded) and network errors are retried by the client's
// retryer, and when it gives up the call returns an error: fail closed, the
// effect does not run. A call whose request was sent runs to its answer even
// if its ctx is cancelled (bounded by keystore.CallTimeout), so that a
// cancelled call never leaves a write nobody knows about; a write whose
// answer is lost anyway is recognised on retry (a Reserve by its nonce, a
// Complete or Release by its token). Results larger than
// [Store.MaxResultSize] (what fits in a 400 KB item beside the other
// attributes) are ErrResultTooLarge before any I/O. Leases and TTLs are
// capped at keystore.MaxDuration.
//
// Durability and consistency are DynamoDB's: writes are durable in several
// availability zones when acknowledged, and conditional writes are
// strongly consistent on the item. Global tables replicate asynchronously
// and resolve conflicts by last writer wins, which breaks fencing across
// regions: use one region's table per key space.
package dynamostore
