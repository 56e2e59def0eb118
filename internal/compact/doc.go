// Package compact is idem's exact in-memory dedup structure (issue 16): a
// set of keyed 96-bit fingerprints in arrival (or expiry) order, at 16
// bytes a record (up to 17 with aux values that do not run one apart) plus
// 5⅓ bytes an index slot, with no pointers for the
// garbage collector to trace. window.Dedup keeps its ids in one; each
// memstore shard keeps its completed, result-less keys in one.
//
// # Layout
//
//   - Records live in 16 KiB arrays of 1024 (a Go size class, so no
//     rounding waste), appended in nondecreasing time: a 96-bit
//     fingerprint and a 4-byte time offset from the chunk's base (a gap
//     over 2³² ns adds a 12-byte rebase, not a chunk). A record's sequence
//     is implied by its position. Sets made with NewSetAux also keep a
//     64-bit value per record (memstore's fencing token) as base +
//     position: nothing a record while the values run exactly one apart,
//     a 16-byte rebase for each of the first 16 in a chunk that do not,
//     then one byte of skew a record.
//   - The index maps fingerprints to 32-bit record ids: 64-byte groups of
//     12 slots (id + 8-bit tag) with an overflow count, as folly's F14,
//     probed by double hashing over a prime number of groups. A lookup
//     reads one cache line in the common case and, for tag matches only,
//     one record.
//     Insertions never move slots; deletions decrement the counts they
//     had raised, so there are no tombstones and no clean-up passes.
//   - Expiry drops records from the front, one index deletion each (no
//     record read), and releases whole chunks: amortised O(1) an id, never
//     a scan of the live set. The index is resized when its load leaves
//     [0.25, 0.92]; its sizes follow a geometric schedule (Set.SetGrowth):
//     by default each is 1.35× the last (load 0.92 down to 0.68), so it
//     costs 5.8 to 7.8 bytes an id. Sets used together can grow by more
//     with their schedules offset (memstore's 64 shards: 1.5×, phases
//     i/64), so that they grow one after another and together hold a
//     step's average, 5⅓·f·ln f/((f−1)·0.92) bytes an id: 7.0 at 1.5×,
//     with 1/(f−1) = 2 moves a record instead of 2.9 (TestStaggeredGrowth,
//     32 sets at 1.6×: 7.1 to 7.6 bytes an id over a fill, against 5.9 to
//     9.1 with one phase for all).
//     Growth is incremental (grow.go): a second index, into which each
//     Append moves 32 records, read sequentially from the chunks (their
//     home groups loaded first in a tight loop, so their cache misses
//     overlap), while lookups that miss the new index probe the old one; the old index
//     (5.8 bytes a record more, for about a tenth of a filling set's
//     growth phase) is released when the move ends. Shrinking, and growth
//     below 16K records, rebuild the index in one call.
//
// [Set.Touch] loads the home groups of a batch of fingerprints the same
// way, before they are looked up one by one: window.Dedup.AddBatch uses it
// so that 16 ids cost about one cache miss's wait instead of 16.
//
// [Set.Prefetch] starts the load of one id's home group with a prefetch
// instruction, and may be called without the owner's lock: it reads only
// an immutable hint that each new index publishes atomically. memstore
// calls it as soon as Reserve has hashed the key, before the key check,
// the shard lock and the clock read, so the miss runs while they do: a
// prefetch, unlike a load (Touch), is not held back by the lock's atomic
// instruction or the clock's fence. At 10M keys it took Reserve + Complete
// from 698 to 752 ns a key to 605 to 731 (six interleaved rounds,
// 2026-12-01, medians 747 and 647); loading the group right after the
// lock instead gained nothing.
//
// # Exactness
//
// Ids are compared by fingerprint, not byte for byte: SipHash-2-4-128 of
// (uvarint(len(scope)), scope, id) under a 128-bit key from crypto/rand,
// cut to 96 bits. A new id is wrongly taken for a live one with probability
// n/2⁹⁶ with n live ids; the chance that any two of n live ids collide is
// about n²/2⁹⁷: 6.3×10⁻¹² at 10⁹ and 6.3×10⁻¹⁰ at 10¹⁰. SipHash is a PRF:
// without the key, crafted ids collide no more often than random ones.
//
// A [Hasher] (what window.Dedup uses; memstore calls Key.Sum) gives ids
// written as canonical UUIDs (36 characters, 8-4-4-4-12 lowercase hex) a
// cheaper path with the same bound: FP = the first 96 bits of
// AES-128_K₁(u ⊕ M(scope)), u being the UUID's 16 bytes and M(scope) =
// SipHash-2-4-128_K₂(scope). K₁ and K₂ are derived from the Key by
// SipHash under it of inputs no Key.Sum input can equal (nine 0xff bytes
// and a label; a Sum input starts with a uvarint of at most eight bytes),
// so a snapshot's Key gives back the same Hasher. Why the bound holds:
//
//   - Parsing is one to one: ParseUUID accepts exactly the canonical form
//     (uppercase and every other spelling take the SipHash path), so two
//     distinct (scope, id) pairs on the AES path are two distinct
//     (scope, u) pairs.
//   - Within one scope the blocks u ⊕ M are distinct for distinct u, and
//     AES is a permutation, so their 128-bit outputs are distinct: the
//     96-bit cut collides only as a random function's would. By the
//     PRP/PRF switching lemma, AES under a secret key is indistinguishable
//     from a random function to within q²/2¹²⁹ for q blocks, so any pair
//     collides with probability 2⁻⁹⁶ and n ids with about n²/2⁹⁷, plus
//     n²/2¹²⁹ (nothing at these n).
//   - Across scopes s ≠ t, u ⊕ M(s) = v ⊕ M(t) only if u ⊕ v = M(s) ⊕ M(t).
//     M is a PRF under a key the id's author does not have, so M(s) ⊕ M(t)
//     is a 128-bit value they cannot know; ids not chosen with knowledge of
//     it hit it with probability 2⁻¹²⁸ a pair, and an equal block gives an
//     equal FP: n²/2¹²⁹ more, again nothing. (With no mask, or a public
//     one, the same UUID in two scopes would collide every time.)
//   - The two paths cannot be aimed at each other: a SipHash-path FP
//     under the Key and an AES-path FP under K₁, K₂ are outputs of
//     independent-looking keyed functions; without the keys a crafted id
//     on one path meets a given FP of the other with probability 2⁻⁹⁶.
//
// The AES path costs a 36-byte parse (eight digits a word, SWAR), the
// cached mask of the last scope seen, and one AES-NI block through
// crypto/aes, whose buffer escapes through the cipher.Block interface:
// Sum allocates it, SumBuf and SumUUID use the caller's (window.Dedup's
// is a field under its lock). Measured (BenchmarkSum, docs/benchmarks.md):
// about as much as SipHash-2-4 of scope and a 36-byte id when Sum
// allocates, less with a buffer; a 10M-id window fill spends about 24 ns
// an id parsing and 24 ns in AES. Ids that look like UUIDs but are not
// canonical (uppercase) pay the parse on top of SipHash.
//
// # What was measured and rejected (2 vCPU VM shared with other jobs, so
// every comparison is within one run)
//
//   - Growth by one rebuild in the Append that crossed the load limit:
//     about 35 ns a live record, so a 0.3 s call at 10M records (longest
//     span of 64 Adds in a 10M window fill: 288 ms; growing incrementally
//     by 32 records an Append: 6 ms, and 11 spans over 1 ms instead of
//     19). Incremental growth moves the same records, so it does not make
//     filling cheaper in total: a filling set moves each record 2.9 to 3.9
//     times (growth by 1.35×, which the 24-byte budget bounds), plus a
//     second probe for a new id while a move is under way. Six rounds of
//     BenchmarkCompact, old and new binaries interleaved: window fill at
//     10M ids 0.84 to 1.92× the map's insert before (median 1.51), 1.19 to
//     1.85× after (median 1.70); at 1M 0.91 to 1.20× before, 1.03 to 1.27×
//     after. The fill is bound by one index cache miss and a SipHash an
//     id (the map hashes the 16 raw bytes with AES), plus the moves.
//   - A directory of small tables (extendible hashing, as Go's swiss
//     map: 16 fingerprint bits choose a table of at most 512 groups, 32
//     KiB; a full table grows 1.35× or splits in two by its next bit, the
//     directory doubling when needed). Go's map moves a key within a table
//     that is in cache because its slots hold the keys; ours hold a record
//     id and 8 tag bits, not the bits that choose a record's new table and
//     home, so every move must read its record from the ring, where the
//     records of one table are scattered: the random read replaces the
//     random write into the big new index, and costs more (a write is
//     loaded for 32 records at once before any is inserted). Per move at
//     10M records (BenchmarkMoveCost, same run): 62.6 to 63.1 ns of CPU
//     for a split's, 42.1 to 44.5 for a rebuild's. Built and measured
//     whole (3 rounds, CPU per insert against the map in the same
//     process): BenchmarkSetFill at 10M 0.85 to 1.63× (before: 0.64 to
//     1.32×), window fill at 1M 1.53 to 1.63× (before 0.98 to 1.30×), at
//     10M 1.61 to 1.76× (0.97 to 1.70×). The moves a record makes are set
//     by the growth factor (1.35×: load 0.92 down to 0.68), which the
//     24-byte budget bounds, not by the table size. Not kept.
//   - Huge pages for the index (madvise(MADV_HUGEPAGE) on the 2 MiB-aligned
//     interior of each new index, so that random probes miss the TLB less):
//     filling 10M fingerprints (BenchmarkSetFill, process CPU time, same
//     run) took 431 to 447 ns an insert with it and 345 to 411 without,
//     the map 392 to 419; with THP in madvise mode the kernel compacts
//     memory at fault time, which costs more than the TLB misses saved.
//   - Linear probing between groups (step 1): at 0.9 load runs of full
//     groups formed, and a steady-state window insert (expire one, add
//     one, 1M live) took 790 to 1660 ns where the map took 607; with
//     double hashing 281 ns where the map took 238.
//   - Robin Hood linear probing with 5-byte slots (4-byte id, 1-byte probe
//     distance): inserts shift the rest of the cluster and every slot with
//     the wanted home costs a record read (a cache miss); at 10M ids it
//     took 2.1 µs an insert where the map took 1.4 µs in the same run. The
//     F14-style groups took 0.37 to 0.45 µs where the map took 0.77 to 0.93.
//   - A single power-of-two ring and table: up to 2× memory right after a
//     doubling. Chunks and a table of any group count follow the live ids.
//   - Chunks with their header inline (16 KiB + 24 bytes): the 18 KiB size
//     class cost 2 bytes an id (24.6 B/id at 10M, 22.7 B/id after).
//   - A chunk per 4.3 s of arrival (32-bit offsets without rebases): a slow
//     stream would cost 16 KiB per 4.3 s of window, hundreds of bytes an id.
//   - hash/maphash with two seeds (fast, keyed) cannot be snapshotted: its
//     seed cannot be exported, so a restored window could not fingerprint
//     new ids the same way. SipHash under a stored key can; kept in
//     registers it costs 45 ns for a UUID id (90 ns as a streaming state).
//   - 64-bit fingerprints: about 2 false duplicates a day at 8.64×10⁹ ids.
//     128-bit ones (~1.5×10⁻¹⁹ at 10¹⁰) would make a record 20 bytes and
//     an id 26 to 28 bytes: over the 24-byte budget.
package compact
