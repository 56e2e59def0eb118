// Package sqlitestore opens a SQLite file as a [keystore.Store], for one
// machine whose keys must survive a restart, with no server to run. The
// store is package sqlstore's on sqldialect.SQLite (table layout, group
// commit, crash behaviour: see there); this package owns the recipe that
// makes it fast under concurrency:
//
//   - one connection (WAL, synchronous=NORMAL, a busy timeout, BEGIN
//     IMMEDIATE: sqldialect.SQLiteDSN), so that writers queue in the store,
//     whose group commit runs them together, instead of in SQLite's busy
//     handler, which sleeps;
//   - a checkpointer on a second connection. SQLite copies the WAL back into
//     the database file in whichever commit makes the WAL cross 1,000 pages,
//     and every call queued behind that commit waits for the copy and its
//     fsync; the checkpointer does that work off the write path every
//     100 ms, and the store's own connection checkpoints only as a backstop
//     (at 16,384 pages).
//
// [Open] sets both up and [Store.Close] takes them down. idem serve opens
// its sqlite: store this way.
package sqlitestore
