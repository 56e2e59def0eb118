// Package engine is the small interface between the inbox's API (package
// inbox: Process, batches, Sweep, Inspect, Forget) and the storage
// engines below it, one folder each: rows (the rows layout), bucketsql
// (the bucketed layout on PostgreSQL and SQLite), bucketmysql (the
// bucketed layout on MySQL and MariaDB), with runs (SQLite's immutable
// runs), bucket (the bucketed layout's tables, catalog, clock and lookup
// filters) and bloom below them.
//
// The inbox promises; an [Engine] stores. The inbox owns transactions,
// retries, hooks, tracing and the redelivery horizon's policy, and hands
// every engine the same [Host]: the database, the dialect, the consumer,
// the table and the options that concern storage. An engine records keys
// inside the transaction it is given and never commits it; what it does
// outside one (creating bucket tables, flushing runs, dropping expired
// buckets) it does in short transactions of its own, through
// [Host.Retry]. The way database/sql keeps drivers behind driver.Conn: a
// new engine is a new folder implementing [Engine].
package engine
