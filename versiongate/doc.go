// Package versiongate applies an update only if its version is newer than
// the stored one, so a repeated message changes nothing and a stale,
// out-of-order message cannot overwrite newer data.
//
//	UPDATE product_view SET price = $1, version = $2 WHERE id = $3 AND version < $2
//
// The stored row has version 5. Version 7 arrives and is applied; a delayed
// version 6 then matches no row, so the newer price is kept. When the row does
// not exist yet, [Gate.Upsert] creates it under the same condition.
//
// The rule assumes each message carries the full new value of the fields it
// sets, not a delta: "price = 12" can be gated by version, "price += 2"
// cannot (use the inbox for deltas). It also needs a per-entity monotonic
// version from the producer, such as an aggregate version in event sourcing
// or a source database's commit sequence; wall-clock timestamps from several
// producers are not monotonic.
//
// A gate holds no state of its own: the version lives in the row, so the
// check and the write are one statement and one transaction. Run it inside
// an inbox handler's transaction, or on its own; a crash before COMMIT leaves
// the old row, and the redelivery applies the update (or finds it stale).
//
// [Memory] is the same rule for state held in process memory.
package versiongate
