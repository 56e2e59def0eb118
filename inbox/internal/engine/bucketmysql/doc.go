// Package bucketmysql is the inbox's bucketed layout on MySQL and MariaDB
// (InnoDB). Bucket tables are
// (d BINARY(16) PRIMARY KEY, fingerprint VARBINARY(64), idem_key
// VARBINARY(255)); a batch costs two statements:
//
//	SELECT 0, @@isolation
//	UNION ALL SELECT 1, d FROM <current bucket> WHERE d IN (…)
//	UNION ALL (SELECT 2, d FROM <other bucket> WHERE d IN (…) LOCK IN SHARE MODE) …
//	INSERT INTO <current bucket> (d, fingerprint, idem_key) VALUES (…), …
//
// MySQL has no RETURNING and no ON CONFLICT DO NOTHING, so the keys that
// are new are the ones the first statement did not find. The insert is a
// plain INSERT: when a concurrent transaction recorded one of them in the
// current bucket meanwhile, it fails whole with 1062 (rolling back only
// itself) and the keys are inserted one at a time, each 1062 a duplicate.
//
// Exactness across buckets. The current bucket's primary key catches a
// concurrent duplicate in the same bucket (InnoDB's duplicate check waits
// for the other inserter to commit or roll back). A duplicate inserted into
// ANOTHER bucket by a concurrent transaction (two deliveries straddling a
// boundary) is caught by the locking reads: at REPEATABLE READ (or
// SERIALIZABLE) a locking read of an absent key takes a gap lock, which
// blocks a concurrent insert of that key into that bucket until this
// transaction ends, and a locking read of a present, uncommitted key waits
// for its inserter. So of two such transactions either one waits for the
// other and then sees its key, or both hold a gap lock where the other
// inserts, and InnoDB rolls one back (1213, retried; the retry sees the
// committed key). At READ COMMITTED InnoDB takes no gap locks, and both
// would commit: every transaction therefore reads the session's isolation
// level in the same statement and refuses READ COMMITTED and READ
// UNCOMMITTED (ErrUnsafeTable).
//
// The current bucket is read without locks: a gap lock there would block
// every concurrent batch whose keys fall in the same gap (with time-ordered
// keys, all of them). Other buckets take inserts only around a boundary, so
// their gap locks cost nothing in between.
//
// Statement text depends only on the bucket list, the batch size and the
// current bucket: a key that a bucket's lookup filter rules out is bound as
// NULL in that bucket's IN list (which matches nothing), so both statements
// are prepared once per list version and reused.
package bucketmysql
