// Command peerbench runs idem beside the libraries users would pick instead
// (Fiber's idempotency middleware, Watermill's Deduplicator), in one
// process, alternating order, and prints the ratios (docs/benchmarks.md).
package main
