// Package bucket is what the inbox's bucketed engines (bucketsql,
// bucketmysql) share: the tables of the layout (a meta table with the salt
// and width, one table <table>_k<start> per time bucket of first arrival,
// keyed by a 16-byte digest), their schema and catalog checks, the list
// of live buckets and its version, the database clock, the lookup filters
// of sealed buckets, and finding or deleting one key.
//
// A State is loaded once per verification of the table (Load) and shared
// by every call of one Inbox; only the bucket list, its statements and the
// clock offset change after that.
package bucket
