// Package digest is the salted 16-byte digest under which the inbox's
// bucketed layout and keystore/sqlstore's digest layout store keys: the
// first 16 bytes of SHA-256 over a table's random salt and the key's name,
// bound as a uuid on PostgreSQL and as 16 bytes elsewhere.
//
// What goes into the name (the inbox's consumer and key, the store's scope
// and key) is each caller's own, and fixed by the tables already written;
// the salt, the cut to 16 bytes, the optional time prefix of a UUIDv7 key,
// and the way a digest is bound and read back are this package's, once.
package digest
