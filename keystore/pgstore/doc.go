// Package pgstore is a [keystore.Store] on a PostgreSQL table, for keys that
// must outlive the process and be shared by many nodes.
//
// One table holds every scope's keys:
//
//	scope text, idem_key bytea   -- primary key
//	state smallint               -- 1 in progress, 2 done
//	token bigint                 -- fencing token, from the sequence TABLE_token
//	takeovers integer            -- expired leases taken over in a row
//	fingerprint bytea, result bytea
//	expires_at timestamptz       -- lease end (in progress) or result end (done); indexed
//
// Every operation is a single statement, so it is atomic and needs no
// explicit transaction: Reserve is an INSERT … ON CONFLICT DO UPDATE that
// takes the key only when it is absent or expired by now(), with a
// nextval() token; Complete an UPDATE and Release a DELETE conditioned on
// the token. Times come from the server's now(), never from the caller.
// Tokens come from one sequence per table, so they increase across
// Release, expiry and [Store.Sweep] (a sequence never goes back; do not
// reset it while leases may be live).
//
// Keys are bytea, so any bytes are valid keys. Expired rows cost nothing
// but space: Reserve treats them as absent. Run [Store.Sweep] periodically
// (idem sweep does) to delete them in bounded, indexed batches; it uses FOR
// UPDATE SKIP LOCKED, so any number of nodes may sweep at once.
//
// If the process dies, each statement has either committed or not. If the
// connection drops during a commit, the caller gets an error without
// knowing the outcome; the lease bounds it (see keystore.Store).
package pgstore
