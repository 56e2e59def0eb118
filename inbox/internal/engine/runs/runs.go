package runs

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idem-go/idem/inbox/internal/engine"
	"github.com/idem-go/idem/inbox/internal/engine/bloom"
	"github.com/idem-go/idem/inbox/internal/engine/bucket"
)

// The meta rows bucket.RunsMeta (the version of the run list; its
// presence marks a table whose buckets hold runs) and bucket.RunWidthMeta
// (the bucket width) are read by bucket.Load.

// FlushKeys is the flush size and Fanout the merge fanout (variables for
// tests); TestHook, when set, is called at each stage of a flush
// ("flush", "merge", "commit"): the crash test dies there.
var (
	FlushKeys = 4096
	Fanout    = 16
	TestHook  func(stage string)
)

func runsStage(s string) {
	if TestHook != nil {
		TestHook(s)
	}
}

// run is a run table: the versions of the flushes it holds, and its keys.
type run struct{ lo, hi, n int64 }

func runName(t string, s int64, r run) string {
	return bucket.Name(t, s) + "_r" + strconv.FormatInt(r.lo, 10) + "_" + strconv.FormatInt(r.hi, 10) + "_" + strconv.FormatInt(r.n, 10)
}

// tier is the size class of a run of n keys: 0 up to FlushKeys·fanout.
func tier(n int64) int {
	t := 0
	for x := n; x >= int64(FlushKeys)*int64(Fanout); x /= int64(Fanout) {
		t++
	}
	return t
}

// Tree is a process's view of a table's runs.
type Tree struct {
	b       *bucket.State
	mu      sync.Mutex
	version int64 // of the list below; -1 before the first read
	runs    map[int64][]run
	// One filter per bucket over all its runs; a bucket with runs and no
	// filter (over the memory budget) is looked up for every key.
	filters map[int64]*runFilter
	// The filters' memory is counted in b.RunBytes, in the lookup
	// filters' budget.
	pending map[int64]int // keys this process put in a hot table since it was flushed
	// expect sizes a new bucket's filter: the most keys a bucket held.
	expect int64
}

func (t *Tree) h() *engine.Host { return t.b.Host() }

// Bytes is the memory of the runs' filters.
func (t *Tree) Bytes() int64 { return t.b.RunBytes.Load() }

// New returns the runs of the table of b (b.HasRuns).
func New(b *bucket.State) *Tree {
	return &Tree{b: b, version: -1, runs: map[int64][]run{}, filters: map[int64]*runFilter{}, pending: map[int64]int{}}
}

// runFilter is a Bloom filter over a bucket's runs that grows in parts.
type runFilter struct {
	parts []*bloom.Filter
	n     []int64 // keys in each part
	cap   []int64
}

func (f *runFilter) add(d [16]byte) {
	last := len(f.parts) - 1
	if last < 0 || f.n[last] >= f.cap[last] {
		var total int64
		for _, c := range f.cap {
			total += c
		}
		c := max(3*total, 1<<16)
		f.parts, f.n, f.cap = append(f.parts, newRunBloom(c)), append(f.n, 0), append(f.cap, c)
		last++
	}
	f.parts[last].Add(d)
	f.n[last]++
}

// runFilterBitsPerKey: 20 bits a key. A bucket's filter has a few parts,
// and a "maybe" costs a lookup in every run of the bucket; about 3 false
// "maybe"s in 10,000 keys per part.
const runFilterBitsPerKey = 20

func newRunBloom(c int64) *bloom.Filter { return bloom.New(c, runFilterBitsPerKey) }

func (f *runFilter) mayContain(d [16]byte) bool {
	for _, p := range f.parts {
		if p.MayContain(d) {
			return true
		}
	}
	return false
}

func (f *runFilter) size() int64 {
	var b int64
	for _, p := range f.parts {
		b += p.Bytes()
	}
	return b
}

// runVersion reads the version of the run list.
func runVersion(ctx context.Context, q engine.Querier, meta string) (int64, error) {
	return scanVersion(q.QueryRowContext(ctx, runVersionSQL(meta)))
}

func scanVersion(row *sql.Row) (int64, error) {
	var v []byte
	if err := row.Scan(&v); err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(v), 10, 64)
}

func runVersionSQL(meta string) string {
	return `SELECT value FROM ` + meta + ` WHERE name = '` + bucket.RunsMeta + `'`
}

func setRunVersion(ctx context.Context, tx *sql.Tx, meta string, v int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE `+meta+` SET value = CAST(? AS BLOB) WHERE name = '`+bucket.RunsMeta+`'`, strconv.FormatInt(v, 10))
	return err
}

// listRuns reads the run tables of t from the catalog, by bucket, each
// bucket's in ascending order of versions.
func listRuns(ctx context.Context, q engine.Querier, t string) (map[int64][]run, error) {
	prefix := t + "_k"
	// The bucket tables come too; parseRun keeps the runs.
	rows, err := q.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, length(?1)) = ?1`, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64][]run{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		s, r, ok := parseRun(strings.TrimPrefix(name, prefix))
		if ok && runName(t, s, r) == name {
			out[s] = append(out[s], r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, rs := range out {
		slices.SortFunc(rs, func(a, b run) int { return int(a.lo - b.lo) })
	}
	return out, nil
}

// parseRun parses "<start>_r<lo>_<hi>_<n>".
func parseRun(s string) (int64, run, bool) {
	start, rest, ok := strings.Cut(s, "_r")
	if !ok {
		return 0, run{}, false
	}
	f := strings.Split(rest, "_")
	if len(f) != 3 {
		return 0, run{}, false
	}
	var v [4]int64
	for i, x := range append([]string{start}, f...) {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, run{}, false
		}
		v[i] = n
	}
	return v[0], run{lo: v[1], hi: v[2], n: v[3]}, true
}

// accounted reports whether the keys of r are all in a filter built from
// the runs old: r is one of them, or the merge of exactly those inside its
// versions (their key counts add up: a key is in one run only).
func accounted(old []run, r run) bool {
	var n int64
	for _, o := range old {
		if o.lo >= r.lo && o.hi <= r.hi {
			n += o.n
		}
	}
	return n == r.n
}

// Merged reports whether name is a run table of a bucket of t that holds
// more than one flush (tests).
func Merged(t, name string) bool {
	_, r, ok := parseRun(strings.TrimPrefix(name, t+"_k"))
	return ok && r.lo != r.hi
}
