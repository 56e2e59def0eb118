// Package sqlitestore is a [keystore.Store] on a SQLite table, for one
// machine whose keys must survive a restart, with no server to run.
//
// Open the database with modernc.org/sqlite and sqldialect.SQLiteDSN (WAL,
// synchronous=NORMAL, a busy timeout, BEGIN IMMEDIATE). The table layout is
// that of pgstore, with times as integer microseconds since the Unix epoch
// from SQLite's own clock (julianday('now'), millisecond resolution), which
// is the machine's clock: every process sharing the file agrees on it.
//
// Every write is one prepared statement: Reserve is an INSERT … ON CONFLICT
// DO UPDATE that takes the key only when it is absent or expired, with the
// next token from a one-row counter table that triggers advance in the same
// statement; when the key is live, a second statement reads it. Complete and
// Release are single conditional statements. A busy database is retried with
// backoff. Tokens come from the counter table, so they increase across
// Release, expiry and [Store.Sweep].
//
// # Group commit
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
// turns through SQLite's write lock, as before. Give the *sql.DB one
// connection (SetMaxOpenConns(1)), or a few: writers then queue in the store
// instead of in SQLite's busy handler, which sleeps.
//
// # Checkpoints
//
// SQLite copies the WAL back into the database file in whichever commit
// makes the WAL cross 1,000 pages, and every call queued behind that commit
// waits for the copy and its fsync. A [Checkpointer] on a second connection
// does that work off the write path; open the store's pool with [DSNSuffix]
// so that its own connection checkpoints only as a backstop. idem serve does
// both.
//
// With synchronous=NORMAL a committed Reserve or Complete survives a process
// crash; a power loss may lose the last transactions, as SQLite documents,
// which can turn a completed key back into absent or in progress: the effect
// may then run again, so pass the key downstream.
package sqlitestore
