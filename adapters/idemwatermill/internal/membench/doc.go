// Package membench holds no code of its own: its benchmarks run memstore's
// Reserve and Complete beside a plain map under one mutex and beside
// Watermill's in-memory deduplication repository, with the same
// UUID-shaped keys in one run, so that the key store idemwatermill uses is
// measured against what a Watermill user has today.
package membench
