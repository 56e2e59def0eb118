// Package runs is the bucketed layout on SQLite as a small LSM tree per
// bucket: immutable, full run tables merged in size tiers, behind one
// Bloom filter per bucket.
//
// With random keys a bucket's B-tree outgrows the page cache's locality:
// every key of a batch dirties its own 4 KiB leaf, and SQLite's WAL writes
// whole pages. So on SQLite the bucket table <table>_k<start> is only the
// bucket's HOT table: new keys go there, in the delivery's transaction as
// before, and while it holds a few thousand keys a batch's keys share its
// few dozen leaves. When this process has put FlushKeys keys into it, a
// flush (a transaction of its own; SQLite has one writer, so nothing races
// it) copies the hot rows in digest order into a new immutable RUN table
//
//	<table>_k<start>_r<lo>_<hi>_<keys>
//
// and deletes them from the hot table. Runs of one bucket are merged in size
// tiers (Fanout runs of a tier into one of the next), and a bucket nobody
// writes to any more (sealed, package bucket) is merged into a single run. A run
// is written into an empty table in key order, so its pages are appended and
// full, and each key is rewritten O(log n) times, sequentially. Retention
// still drops whole buckets: their runs go with them (package bucketsql).
//
// Exactness. A key is looked up exactly, in the delivery's transaction, in
// the hot tables (the insert and its NOT EXISTS probes, package bucketsql) and in
// the runs of a bucket whose filter says it may be there. Each process keeps
// one Bloom filter per bucket over all of the bucket's runs; a run never
// changes, and a merge moves keys between runs of one bucket without adding
// any, so the filter only ever grows by the keys of flushes. The meta row
// 'runs' holds a version that every flush, merge and drop raises, in the same
// transaction; each transaction that records keys reads it first and, when
// another process changed the runs, reads the new list (and the keys of runs
// it has not accounted for) before looking anything up. A crash mid-flush or
// mid-merge rolls the whole transaction back: the keys stay in the hot table
// or in the runs being merged.
package runs
