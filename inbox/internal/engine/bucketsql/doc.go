// Package bucketsql is the inbox's bucketed layout on PostgreSQL and
// SQLite: how a delivery records its key in the current bucket while
// looking it up in every live one (one INSERT … SELECT … WHERE NOT EXISTS
// … ON CONFLICT DO NOTHING RETURNING), how Sweep drops expired buckets in
// one transaction, and how PostgreSQL's sealed buckets are packed. The
// tables, catalog, clock and lookup filters are package bucket's; SQLite's
// immutable runs are package runs'.
package bucketsql
