// Package sqlstore is a [keystore.Store] on a database/sql table, on
// PostgreSQL (keys shared by many nodes) or SQLite (one machine, no server;
// package sqlitestore opens the file the recommended way).
//
//	db, _ := sql.Open("pgx", dsn)
//	s, err := sqlstore.New(db, sqldialect.Postgres, sqlstore.WithTable("idem_keys"))
//	if err != nil { ... }
//	err = s.Migrate(ctx) // or apply s.SchemaSQL() with your migration tool
//
// One table holds every scope's keys. New tables get [LayoutDigest]:
//
//	d                      -- primary key: 16-byte digest of (scope, key)
//	                          (uuid on PostgreSQL; a BLOB with a unique index on
//	                          SQLite, whose rows stay in arrival order)
//	expires_at             -- lease end (in progress) or result end (done); indexed
//	token                  -- fencing token: TABLE_token + 1, floored by the
//	                          database's clock in µs (see docs/ha.md)
//	takeovers              -- expired leases taken over in a row
//	state                  -- 1 in progress, 2 done
//	name                   -- scope, a zero byte, the key: not indexed
//	fingerprint, result    -- bytea / BLOB
//
// The digest is SHA-256 of the table's random salt (kept in TABLE_meta,
// so every process sharing the table computes the same digests) and the
// name, cut to 16 bytes. Every statement on a key matches the name too, so
// a digest collision (about n²/2¹²⁹ for n keys) is never a false duplicate:
// a Reserve that meets another key's live row under its digest fails with
// [ErrDigestCollision]. Inspect, List, Forget and idem keys show the keys
// as given; List pages in digest order, with the hex of the last digest as
// its cursor.
//
// A table made by a release before the digest layout ([LayoutRows]: primary
// key (scope, idem_key)) keeps working as it is; [Store.MigrateLayout]
// moves it to the digest layout in one transaction (see docs/keystore.md).
//
// Every write is one statement, so it is atomic and needs no explicit
// transaction: Reserve is an INSERT … ON CONFLICT DO UPDATE that takes the
// key only when it is absent or expired by the database's clock, with the
// next token (on PostgreSQL drawn after a transaction-scoped advisory lock
// on the key, so that an insert which waited on a concurrent Release cannot
// take the key with a token older than one handed out meanwhile); Complete
// an UPDATE and Release a DELETE conditioned on the token. Times come from the database, never from the caller: timestamptz
// from now() on PostgreSQL, integer microseconds since the Unix epoch from
// julianday('now') on SQLite (millisecond resolution; the machine's clock,
// on which every process sharing the file agrees). Tokens come from one
// sequence per table (PostgreSQL) or from a one-row counter table that
// triggers advance in the same statement (SQLite), so they increase across
// Release, expiry and [Store.Sweep]; do not reset them while leases may be
// live. Serialization failures, deadlocks and a busy SQLite are retried
// with jittered backoff; none of them can have committed.
//
// Keys are stored as bytes, so any valid key is stored as given. Expired
// rows cost nothing but space: Reserve treats them as absent. Run
// [Store.Sweep] periodically (idem sweep does) to delete them in bounded,
// indexed batches; on PostgreSQL it uses FOR UPDATE SKIP LOCKED, so any
// number of nodes may sweep at once.
//
// # Group commit (SQLite)
//
// SQLite has one writer at a time, so concurrent calls of one Store (and of
// its scoped views) commit together: the first caller to find no
// transaction running leads, runs every Reserve, Complete and Release queued
// behind it (up to 64) in one transaction, and hands the lead on. Each call
// returns only after the transaction holding it committed, so each still
// takes effect between its call and its return; if any statement of a
// shared transaction fails, it is rolled back and each call runs again on
// its own. A call whose ctx ends while it waits for its turn does not run.
// Several processes sharing the file each group their own calls and take
// turns through SQLite's write lock. Give the *sql.DB one connection
// (SetMaxOpenConns(1)), or a few: writers then queue in the store instead of
// in SQLite's busy handler, which sleeps.
//
// # Waiters (PostgreSQL)
//
// A store given a [Listener] with [WithListener] (package pglisten, on
// pgx) is a keystore.Notifier: its Complete and Release notify the
// table's channel (pg_notify, delivered at commit) with a hash of the
// key's scope and name, and keystore.Await wakes a waiting duplicate as
// soon as its key is completed or released, by any process whose store
// has a listener, instead of at its next poll. The store listens on one
// pooled connection, shared by its scoped views, only while somebody
// waits. PostgreSQL serialises the commits of notifying transactions, so
// a store without a listener does not notify. On SQLite waiters poll.
//
// # Crashes
//
// If the process dies, each statement has either committed or not. If the
// connection drops during a commit, the caller gets an error without
// knowing the outcome; the lease bounds it (see keystore.Store). On SQLite
// with synchronous=NORMAL a committed Reserve or Complete survives a process
// crash; a power loss may lose the last transactions, as SQLite documents,
// which can turn a completed key back into absent or in progress: the effect
// may then run again, so pass the key downstream.
package sqlstore
