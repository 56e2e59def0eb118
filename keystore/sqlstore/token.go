package sqlstore

// Tokens are floored by the database's clock, so that they keep increasing
// through a failover that loses the tail of the primary's WAL.
//
// A sequence alone (the releases before this one) hands out again, after
// promotion, every value the old primary handed out and did not ship: a
// key reserved, released and reserved again on the old primary, then on
// the new one, gets a token it already had, and a completed row the
// standby never saw is taken with a token lower than its holder's (issue
// 29: 109-123 tokens handed out again, 3 claims backwards, in 2,000 keys).
//
// So a token is the larger of the sequence's next value and the database
// server's clock in microseconds since 1970 (about 2^50.6 in 2026, inside
// bigint and exact in a float64), stored back into the sequence so that
// the next one is higher still even if the clock steps back; and a Reserve
// that takes over an existing row also takes at least its token plus one.
// Every token the old primary handed out was at most its clock at that
// moment (the sequence runs ahead of the clock only at more than one
// Reserve a microsecond), and every token after the failover is at least
// the new primary's clock. Tokens therefore never repeat or go backwards
// through a failover as long as the new primary's clock is not behind the
// old one's by more than the failover took: from the last Reserve that
// was lost to the first one on the new primary (seconds, under Patroni at
// least its loop_wait; clocks kept by NTP are within milliseconds).
//
// SQLite's counter row gets the same floor (a database file restored from
// a copy then continues above the tokens handed out since the copy).

// pgClock is the PostgreSQL server's clock in microseconds since 1970:
// clock_timestamp(), not now(), so that a statement that waited on a lock
// draws the time it runs.
const pgClock = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

// pgNextToken draws a token: max(sequence + 1, clock), stored back. setval
// returns the value it set.
const pgNextToken = "setval('{SEQ}', GREATEST(nextval('{SEQ}'), " + pgClock + "))"

// sqliteNextToken: the counter row plus one, or SQLite's clock if that is
// higher; the triggers on the key table store it back (sqliteCounter).
const sqliteNextToken = "(SELECT max(v + 1, " + nowSQLite + ") FROM {SEQ} WHERE id = 1)"
