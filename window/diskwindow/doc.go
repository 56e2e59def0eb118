// Package diskwindow is a persistent, exact time-window dedup set: the
// semantics of [github.com/idem-go/idem/window] (Add answers new or
// duplicate; an id expires by its first-arrival time after the horizon;
// scopes are independent) for a day of ids on one disk, at under 8 bytes
// an id on disk and under 1 byte an id of memory for all but the newest
// generation.
//
// # Layout
//
// A Set lives in one directory and is meant for one partition (a Kafka
// partition, a JetStream stream or subject filter, a consumer shard):
// sharding is placing partitions, and a partition moves by copying its
// directory. The newest generation is in memory (about 22 bytes an id)
// and in an append-only journal of fingerprints. When it is horizon/k old
// ([WithGenerations], default k = 24) or holds [WithMaxOpen] ids, it is
// sealed in the background (it answers from memory until its file is in
// place): its fingerprints, sorted, are written to an immutable file in
// an Elias–Fano code, of which the top bits (upper bits in unary, 1.5 to
// 2 bits an id) and five or six more bits an id (six where they fit under
// a byte an id) stay in memory as the generation's index and filter, and
// the rest are read from disk, one 4 KiB block, only for an id that
// matches those in memory (for a new id about one generation in 16 to 64;
// in 51 at the default WithMaxOpen). In the background, sealed files are
// merged while the result stays under 2³² ids: each value of a merged
// file carries a tag naming its generation, so that each generation still
// expires on its own, and a new id probes one file for every 2³² ids
// rather than one for every generation. A file is deleted whole once its
// newest id has expired; a merge drops expired generations, and a file
// whose expired ids reach a quarter of it is rewritten without them.
//
// # Guarantees
//
// A true duplicate is never answered new: an id first accepted less than
// the horizon ago is a duplicate, after restarts and crashes too (see
// [Set.Add] for when an answer is durable). An id stays a duplicate until
// its generation expires: at most horizon + horizon/k after its first
// accept (the open generation's ids expire exactly at the horizon).
// Between horizon and horizon + horizon/k an id may be answered either
// way.
//
// Ids are compared by an f-bit keyed fingerprint ([WithFingerprintBits],
// default 85): the first bits of SipHash-2-4-128 of (scope, id) under a
// 128-bit key drawn when the set is created and kept in its manifest, or
// for a canonical UUID id the AES-128 permutation of internal/compact.
// A new id is answered duplicate falsely only if its fingerprint equals a
// live id's: probability at most L/2^f with L live ids, so over N adds at
// most N·L/2^f. The seeds' day, N = L = 8.64×10⁹ (100k ids a second for
// 24 hours, every id live all day): 7.46×10¹⁹/2⁸⁵ = 1.9×10⁻⁶ as a plain
// bound, and 9.6×10⁻⁷ counting that the i-th id meets at most i−1 live
// ones (N²/2^(f+1)). Sharded over P sets the sum is P times smaller.
// Because the key is secret, crafted ids collide no more often than
// random ones. Who can read the directory can craft collisions: the
// files are created readable by their owner only.
//
// A damaged file (bad magic, version, size, key or checksum: CRC-32C over
// the header, over the in-memory part, and over each 4 KiB block of the
// rest) is refused with a [*CorruptError] naming it, never half-read: at
// Open for everything Open reads (everything, with [WithVerify]), and by
// the lookup that reads a damaged block otherwise. Deleting a damaged
// sealed file forgets its ids.
//
// # Costs
//
// Disk: 2 + f − log₂(n) bits an id for a file of n ids, plus ⌈log₂ g⌉ tag
// bits for a file merged from g generations and 0.1% of block checksums:
// 7.7 bytes an id at n = 4.2×10⁷ (5·2²³, the default WithMaxOpen), and as
// much for four such generations merged (the tags' two bits are the two
// the larger n saves); 7.4 for the seeds' day (n = 4.3×10⁹ a file, 12
// hourly generations, 4 tag bits). Each sealed file costs one in-memory
// probe per new id; merging keeps them to one per 2³² ids. A merge needs
// the disk of the file it writes, and its in-memory part beside its
// inputs' while it runs.
// Measured figures: docs/dedup-disk.md and docs/benchmarks.md.
package diskwindow
