// Package bloom is the blocked Bloom filter with which the inbox's
// bucketed layout skips looking keys up in buckets (and SQLite runs) that
// cannot hold them: a key's 7 bits are in one 64-byte block, so a lookup
// costs one cache miss. It never answers "absent" for a key it was given.
package bloom
