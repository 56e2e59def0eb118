package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// Measured bytes per key (docs/benchmarks.md, docs/inbox.md); the plan
// multiplies them, it does not guess them.
const (
	pgBucketBytes      = 78.4
	sqliteBucketBytes  = 26.5
	mariadbBucketBytes = 62.9
)

// Measured retention costs for 1M expired keys (TestScaleRetire, PostgreSQL
// 15, fsync on): the rows layout's Sweep deletes every row and VACUUM
// follows; the bucketed layout drops whole tables.
const (
	rowsRetireWALPerKey   = 217.7  // bytes of WAL per key retired (218 MB for 1M)
	rowsRetireSecPerMKey  = 14.4   // seconds per million keys, Sweep + VACUUM
	bucketRetireWALPerTab = 15024  // bytes of WAL per bucket table dropped (135 KB for 9)
	bucketRetireSecPerTab = 0.0059 // seconds per bucket table dropped (53 ms for 9)
)

// The SQL key store (keystore/sqlstore, digest layout): bytes per done key
// with an empty result, and Sweep's cost per expired key on PostgreSQL
// (TestScaleKeys and TestScaleRetire, 1M random UUIDv4 keys, docs/keystore.md).
const (
	keysPGBytes         = 163.6
	keysSQLiteBytes     = 136.4
	keysSweepWALPerKey  = 269.6 // bytes of WAL per key Sweep deletes, VACUUM included
	keysSweepSecPerMKey = 104.0 // seconds per million keys, at load average 14-22
)

// windowRow is the row sized by the broker-side window instead of the
// horizon.
const windowRow = "window.Dedup (any id length: 96-bit fingerprints)"

var perKey = []struct {
	structure string
	bytes     float64
	where     string
	note      string
}{
	{"inbox on PostgreSQL, bucketed layout (16-byte digest, uuid PK)", pgBucketBytes, "disk", "random UUIDv4 keys, 10M, sealed buckets packed by Sweep (TestScaleCurve); 85.5 as written (20M), bare uuid table 84.6"},
	{"inbox on SQLite, bucketed layout (16-byte digest, runs)", sqliteBucketBytes, "disk", "random UUIDv4 keys, 20M (TestScaleCurve)"},
	{"inbox on MariaDB, bucketed layout (BINARY(16) digest, InnoDB PK)", mariadbBucketBytes, "disk", "random UUIDv4 keys, 10M (TestScaleCurve); bare BINARY(16) table 52.5, UUIDv7 keys 39.6"},
	{"inbox on PostgreSQL, rows layout (row + PK + sweep index)", 161.4, "disk", "earlier releases; 36-char UUID keys"},
	{"inbox on SQLite, rows layout (table + sweep index)", 125.2, "disk", "earlier releases; 36-char UUID keys"},
	{"keystore memstore (done keys, no results; compact tier)", 23.73, "RAM", "10M random keys (make bench-compact)"},
	{"keystore sqlstore on PostgreSQL, digest layout (done keys)", keysPGBytes, "disk", "random UUIDv4 keys, 1M (TestScaleKeys); plus results"},
	{"keystore sqlstore on SQLite, digest layout (done keys)", keysSQLiteBytes, "disk", "random UUIDv4 keys, 1M (TestScaleKeys); plus results"},
	{"keystore redisstore (done keys, no results)", 214.2, "RAM", "Redis 7.0 used_memory, 200k UUIDv4 keys; bare SET NX PX 156.3 in the same run"},
	{"keystore natsstore (done keys, no results; per replica)", 239.3, "disk", "JetStream stream bytes, R3 file bucket, 20k UUIDv4 keys; bare KV Create 147.0"},
	{"Redis SET NX PX key (the bare anchor, same run)", 156.3, "RAM", "Redis 7.0 used_memory, 200k UUIDv4 keys"},
	{"window/diskwindow (sealed generations on disk, 85-bit fingerprints)", 7.73, "disk", "2x10^8 random UUIDs (make bench-dedup-disk), 5x2^23-id generations merged into one file; about 7.4 for the seeds' day (files of 2^32 ids, tags included); the open generation adds 12 B/id of journal and 22 B/id of RAM"},
	{"window/diskwindow, sealed generations' index and filter", 0.994, "RAM", "2x10^8 random UUIDs (make bench-dedup-disk)"},
	{windowRow, 23.81, "RAM", "sized by the window, not the horizon; 10M ids, up to 29.7 while its index grows"},
}

type planFlags struct {
	rate        float64
	horizon     time.Duration
	window      time.Duration
	producers   int
	partitions  int
	resultBytes int
}

func newPlan() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan --rate N --horizon D",
		Short: "Size the dedup store: keys retained and bytes, from measured bytes per key",
		Long: `plan prints how many keys each strategy retains and what they cost, for a
message rate and a duplicate horizon (the longest time after which a duplicate
can still arrive: broker retention or redelivery window plus the client retry
horizon). keys = rate × horizon; bytes = keys × bytes per key, with bytes per
key measured by idem's benchmarks on this project's machine.`,
		Example: "  idem plan --rate 100000 --horizon 24h\n  idem plan --rate 2000 --horizon 168h --window 2m --producers 50 --partitions 12",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.rate <= 0 || f.horizon <= 0 || f.window < 0 || f.producers < 0 || f.partitions < 0 || f.resultBytes < 0 {
				return fmt.Errorf("plan: --rate and --horizon must be positive, the others not negative")
			}
			writePlan(cmd.OutOrStdout(), f)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&f.rate, "rate", 0, "unique messages per second (required)")
	durationVar(fl, &f.horizon, "horizon", 0, "duplicate horizon: keep keys at least this long (required)")
	durationVar(fl, &f.window, "window", 2*time.Minute, "broker-side dedup window (JetStream default 2m, SQS FIFO 5m)")
	fl.IntVar(&f.producers, "producers", 100, "producers, for sequence marks")
	fl.IntVar(&f.partitions, "partitions", 1, "partitions per producer, for sequence marks")
	fl.IntVar(&f.resultBytes, "result-bytes", 0, "stored result per key (key store, HTTP responses)")
	return cmd
}

func writePlan(w io.Writer, f planFlags) {
	keys := f.rate * f.horizon.Seconds()
	fmt.Fprintf(w, "keys retained = %s/s × %v = %s keys\n\n", human(f.rate), f.horizon, human(keys))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\tbytes/key\tkeys\ttotal\twhere")
	for _, p := range perKey {
		n := keys
		if p.structure == windowRow {
			n = f.rate * f.window.Seconds()
		}
		b := p.bytes
		if f.resultBytes > 0 && ((p.where == "RAM" && p.structure != windowRow) || strings.HasPrefix(p.structure, "keystore sqlstore")) {
			b += float64(f.resultBytes)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%s\n", p.structure, b, human(n), bytesHuman(n*b), p.where)
	}
	marks := float64(f.producers * max(f.partitions, 1))
	fmt.Fprintf(tw, "sequence marks (one per producer-partition)\t24.6\t%s\t%s\tRAM or one row each\n", human(marks), bytesHuman(marks*24.6))
	tw.Flush()
	writeRetention(w, f)
	fmt.Fprintf(w, "\nA TTL shorter than %v lets late duplicates through as new messages; much longer pays for keys no duplicate will ask for.\n", f.horizon)
}

func human(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f×10^9", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}

func bytesHuman(b float64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for b >= 1000 && i < len(units)-1 {
		b /= 1000
		i++
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}

// writeRetention prints what retiring a horizon's worth of keys costs on
// PostgreSQL, each day, in the inbox's two layouts.
func writeRetention(w io.Writer, f planFlags) {
	perDay := f.rate * 86400
	// The bucketed layout's default width is a quarter of the retention:
	// four bucket tables dropped per horizon, so 4 × (24 h / horizon) a day.
	drops := 4 * (24 * time.Hour).Hours() / f.horizon.Hours()
	fmt.Fprintf(w, "\nretention on PostgreSQL, per day (%s keys expire a day):\n", human(perDay))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "inbox layout\tWAL\ttime\thow")
	fmt.Fprintf(tw, "rows (Sweep deletes each key, then VACUUM)\t%s\t%s\tO(keys): %.0f B of WAL a key\n",
		bytesHuman(perDay*rowsRetireWALPerKey), (time.Duration(perDay/1e6*rowsRetireSecPerMKey) * time.Second).Round(time.Second), rowsRetireWALPerKey)
	fmt.Fprintf(tw, "bucketed (Sweep drops whole bucket tables)\t%s\t%s\tO(buckets): %.1f tables a day\n",
		bytesHuman(drops*bucketRetireWALPerTab), (time.Duration(drops*bucketRetireSecPerTab*1e3) * time.Millisecond).Round(time.Millisecond), drops)
	tw.Flush()
	fmt.Fprintf(w, "key store (sqlstore), if as many keys expire a day: Sweep deletes each key: %s of WAL, %s (%.0f B of WAL a key)\n",
		bytesHuman(perDay*keysSweepWALPerKey), (time.Duration(perDay/1e6*keysSweepSecPerMKey) * time.Second).Round(time.Second), keysSweepWALPerKey)
}
