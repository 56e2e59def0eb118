package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

// inboxFlags are the flags every idem inbox command takes.
type inboxFlags struct {
	db, table, consumer, output string
}

// inboxDBForms lists what --db accepts, for errors and help.
const inboxDBForms = "sqlite:PATH, postgres://… (postgresql://) or mysql://USER:PASS@tcp(HOST:PORT)/DB (after mysql:// a go-sql-driver DSN)"

// recordView is one inbox record as idem inbox show prints it.
type recordView struct {
	Consumer    string    `json:"consumer"`
	Key         string    `json:"key"`
	Layout      string    `json:"layout"`
	Table       string    `json:"table"`
	Run         bool      `json:"run,omitempty"`
	RecordedAt  time.Time `json:"recorded_at,omitzero"`
	Bucket      time.Time `json:"bucket,omitzero"`
	BucketWidth string    `json:"bucket_width,omitempty"`
	Fingerprint string    `json:"fingerprint,omitempty"` // hex
}

func recordViewOf(r inbox.Record) recordView {
	v := recordView{Consumer: r.Consumer, Key: r.Key, Layout: r.Layout.String(), Table: r.Table, Run: r.Run,
		RecordedAt: r.RecordedAt, Bucket: r.Bucket, Fingerprint: hex.EncodeToString(r.Fingerprint)}
	if r.BucketWidth > 0 {
		v.BucketWidth = r.BucketWidth.String()
	}
	return v
}

func newInbox() *cobra.Command {
	var f inboxFlags
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Show or forget one key of an inbox table; migrate or sweep the table",
		Long: `inbox shows an operator one key the inbox recorded, and forgets it when one
message must be re-run on purpose; it also moves a table of an earlier release
to the bucketed layout and runs retention, for a shell or a cron job.

  idem inbox show KEY --consumer C      is KEY recorded for consumer C, where, with which fingerprint
  idem inbox forget KEY --consumer C    delete the record: the next delivery of KEY runs its handler again
  idem inbox migrate-layout --consumer C --retention D
                                        move a rows table to the bucketed layout, with deliveries running
  idem inbox sweep --consumer C --older-than D
                                        drop expired buckets (delete expired rows on the rows layout)

forget is dangerous: the message's effect is applied AGAIN by its next delivery
(the inbox cannot undo the first one). Forget a key only when the first
application was undone or never took effect, and redeliver the message yourself
if the broker will not. See docs/operations.md, "Re-running one inbox message".

--db is ` + inboxDBForms + `.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.db, "db", "", "the inbox's database: "+inboxDBForms+" (required)")
	pf.StringVar(&f.table, "table", "idem_inbox", "the inbox's key table (inbox.WithTable)")
	pf.StringVar(&f.consumer, "consumer", "", "the consumer name the key was recorded under (inbox.New's consumer; required)")
	pf.StringVarP(&f.output, "output", "o", "text", "text or json")
	_ = cmd.MarkPersistentFlagRequired("db")
	_ = cmd.MarkPersistentFlagRequired("consumer")
	cmd.AddCommand(newInboxShow(&f), newInboxForget(&f), newInboxMigrateLayout(&f), newInboxSweep(&f))
	return cmd
}

func newInboxShow(f *inboxFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show KEY --consumer C --db DB",
		Short: "Show whether KEY is recorded, and where",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withInbox(cmd, f, "show", func(ctx context.Context, in *inbox.Inbox, _ *sql.DB, _ sqldialect.Dialect) error {
				rec, err := in.Inspect(ctx, f.consumer, args[0])
				if err != nil {
					return err
				}
				return printRecord(cmd.OutOrStdout(), f.output, rec)
			})
		},
	}
}

func newInboxForget(f *inboxFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "forget KEY --consumer C --db DB",
		Short: "Delete KEY's record: its next delivery applies its effect again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withInbox(cmd, f, "forget", func(ctx context.Context, in *inbox.Inbox, _ *sql.DB, _ sqldialect.Dialect) error {
				rec, err := in.Inspect(ctx, f.consumer, args[0])
				if err != nil {
					return err
				}
				if err := in.Forget(ctx, f.consumer, args[0]); err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if f.output == "json" {
					return json.NewEncoder(out).Encode(struct {
						Forgot recordView `json:"forgot"`
					}{recordViewOf(rec)})
				}
				fmt.Fprintf(out, "forgot %s of consumer %s (was in %s): its next delivery runs the handler again\n", rec.Key, rec.Consumer, rec.Table)
				return nil
			})
		},
	}
}

func newInboxMigrateLayout(f *inboxFlags) *cobra.Command {
	var retention, width time.Duration
	cmd := &cobra.Command{
		Use:   "migrate-layout --consumer C --db DB (--retention D | --bucket-width D)",
		Short: "Move a rows-layout table to the bucketed layout, with deliveries running",
		Long: `migrate-layout runs inbox.MigrateLayout: the rows table of an earlier release is
frozen by a trigger (an insert there fails, so an earlier release's delivery is
not acknowledged and comes back), keys go to buckets from then on, and every key
is still looked up in the rows table until Sweep drops it, once the migration is
older than the sweep's age. Deliveries may run meanwhile; no duplicate slips
through (docs/inbox.md, "Upgrading a table made by an earlier release").

The bucket width is stored with the table and cannot change later: give the
retention (the width is a quarter of it, at least a minute) or the width.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []inbox.Option
			switch {
			case retention != 0 && width != 0:
				return fmt.Errorf("inbox migrate-layout: give --retention or --bucket-width, not both")
			case retention != 0:
				opts = append(opts, inbox.WithRetention(retention))
			case width != 0:
				opts = append(opts, inbox.WithBucketWidth(width))
			default:
				return fmt.Errorf("inbox migrate-layout: --retention or --bucket-width is required: the bucket width is stored with the table")
			}
			return withInbox(cmd, f, "migrate-layout", func(ctx context.Context, in *inbox.Inbox, db *sql.DB, d sqldialect.Dialect) error {
				rows, meta, err := inboxTables(ctx, db, d, f.table)
				if err != nil {
					return err
				}
				report := func(migrated bool, text string) error {
					if f.output == "json" {
						return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
							Table    string `json:"table"`
							Migrated bool   `json:"migrated"`
						}{f.table, migrated})
					}
					_, err := fmt.Fprintln(cmd.OutOrStdout(), text)
					return err
				}
				if meta && !rows {
					return report(false, f.table+" has the bucketed layout already: nothing to do")
				}
				if err := in.MigrateLayout(ctx); err != nil {
					return err
				}
				if meta {
					return report(false, f.table+" was migrated already (the rows table is frozen and read until Sweep drops it): nothing to do")
				}
				return report(true, "migrated "+f.table+" to the bucketed layout: the rows table is frozen and read beside the buckets until Sweep drops it, once the migration is older than the sweep's age")
			}, opts...)
		},
	}
	durationVar(cmd.Flags(), &retention, "retention", 0, "how long keys are kept (inbox.WithRetention); the bucket width is a quarter of it")
	durationVar(cmd.Flags(), &width, "bucket-width", 0, "the bucket width itself (inbox.WithBucketWidth), whole seconds, at least 1s")
	return cmd
}

func newInboxSweep(f *inboxFlags) *cobra.Command {
	var olderThan time.Duration
	var batch int
	cmd := &cobra.Command{
		Use:   "sweep --consumer C --db DB --older-than D",
		Short: "Drop the buckets older than D (on the rows layout, delete the consumer's rows)",
		Long: `sweep runs inbox.Sweep once. On the bucketed layout it drops every bucket whose
newest key is older than --older-than (buckets hold every consumer's keys, so
the largest redelivery horizon any consumer recorded binds it), drops a migrated
rows table once the migration is that old, and on PostgreSQL packs each bucket
sealed for a width. On the rows layout it deletes the consumer's rows older than
--older-than, --batch at a time. It refuses an age below a recorded horizon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withInbox(cmd, f, "sweep", func(ctx context.Context, in *inbox.Inbox, db *sql.DB, d sqldialect.Dialect) error {
				_, meta, err := inboxTables(ctx, db, d, f.table)
				if err != nil {
					return err
				}
				n, err := in.Sweep(ctx, olderThan, batch)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if f.output == "json" {
					v := struct {
						Table   string `json:"table"`
						Dropped *int   `json:"dropped_tables,omitempty"`
						Deleted *int   `json:"deleted_keys,omitempty"`
					}{Table: f.table}
					if meta {
						v.Dropped = &n
					} else {
						v.Deleted = &n
					}
					return json.NewEncoder(out).Encode(v)
				}
				if meta {
					fmt.Fprintf(out, "dropped %d tables of %s (buckets, and a migrated rows table, older than %v)\n", n, f.table, olderThan)
				} else {
					fmt.Fprintf(out, "deleted %d keys of consumer %s older than %v from %s\n", n, f.consumer, olderThan, f.table)
				}
				return nil
			})
		},
	}
	durationVar(cmd.Flags(), &olderThan, "older-than", 0, "the sweep's age: keys older than this go (required; not below the redelivery horizon)")
	cmd.Flags().IntVar(&batch, "batch", 10_000, fmt.Sprintf("rows a transaction deletes on the rows layout, 1 to %d", inbox.MaxSweepBatch))
	_ = cmd.MarkFlagRequired("older-than")
	return cmd
}

func printRecord(out io.Writer, format string, r inbox.Record) error {
	v := recordViewOf(r)
	if format == "json" {
		return json.NewEncoder(out).Encode(v)
	}
	fmt.Fprintf(out, "key:          %s\nconsumer:     %s\nlayout:       %s\ntable:        %s", v.Key, v.Consumer, v.Layout, v.Table)
	if v.Run {
		fmt.Fprint(out, " (an immutable run of the bucket)")
	}
	fmt.Fprintln(out)
	if !v.RecordedAt.IsZero() {
		fmt.Fprintf(out, "recorded at:  %s\n", v.RecordedAt.Format(time.RFC3339Nano))
	}
	if !v.Bucket.IsZero() {
		fmt.Fprintf(out, "bucket:       %s (width %s: recorded before %s)\n", v.Bucket.Format(time.RFC3339), v.BucketWidth, r.Bucket.Add(r.BucketWidth).Format(time.RFC3339))
	}
	fp := v.Fingerprint
	if fp == "" {
		fp = "(none)"
	}
	fmt.Fprintf(out, "fingerprint:  %s\n", fp)
	return nil
}

// withInbox opens the database of f and an Inbox on its table for one
// command; its errors start with "inbox <verb>:". It creates no table.
func withInbox(cmd *cobra.Command, f *inboxFlags, verb string, fn func(ctx context.Context, in *inbox.Inbox, db *sql.DB, d sqldialect.Dialect) error, opts ...inbox.Option) error {
	err := func() error {
		if f.output != "text" && f.output != "json" {
			return fmt.Errorf("--output %q: want text or json", f.output)
		}
		db, d, err := openInboxDB(f.db)
		if err != nil {
			return err
		}
		defer db.Close()
		ctx := cmd.Context()
		if err := checkInboxTable(ctx, db, d, f.table); err != nil {
			return err
		}
		in, err := inbox.New(db, d, f.consumer, append([]inbox.Option{inbox.WithTable(f.table)}, opts...)...)
		if err != nil {
			return err
		}
		defer in.Close()
		return fn(ctx, in, db, d)
	}()
	if err != nil {
		return fmt.Errorf("inbox %s: %w", verb, err)
	}
	return nil
}

var errInboxDB = errors.New("invalid --db")

// openInboxDB opens a --db value; it refuses a SQLite file that does not
// exist rather than create an empty one.
func openInboxDB(s string) (*sql.DB, sqldialect.Dialect, error) {
	var driver, dsn string
	var d sqldialect.Dialect
	switch {
	case strings.HasPrefix(s, "sqlite:"):
		p := strings.TrimPrefix(s, "sqlite:")
		if p == "" || strings.ContainsAny(p, "?#\x00") {
			return nil, d, fmt.Errorf("%w %q: want sqlite:PATH, a file path without ? or #", errInboxDB, s)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, d, fmt.Errorf("--db %s: %w", s, err)
		}
		driver, dsn, d = "sqlite", sqldialect.SQLiteDSN(p), sqldialect.SQLite
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		driver, dsn, d = "pgx", s, sqldialect.Postgres
	case strings.HasPrefix(s, "mysql://"):
		dsn = strings.TrimPrefix(s, "mysql://")
		if _, err := mysql.ParseDSN(dsn); err != nil {
			return nil, d, fmt.Errorf("%w %q: want mysql://USER:PASS@tcp(HOST:PORT)/DB: %v", errInboxDB, redactURL(s), err)
		}
		driver, d = "mysql", sqldialect.MySQL
	default:
		return nil, d, fmt.Errorf("%w %q: want %s", errInboxDB, redactURL(s), inboxDBForms)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, d, fmt.Errorf("--db %s: %w", redactURL(s), err)
	}
	return db, d, nil
}

// checkInboxTable refuses a database without the inbox's table (in either
// layout), so that a wrong --db or --table is told, not migrated.
func checkInboxTable(ctx context.Context, db *sql.DB, d sqldialect.Dialect, table string) error {
	if err := d.ValidateIdentifier(table); err != nil {
		return fmt.Errorf("--table: %w", err)
	}
	rows, meta, err := inboxTables(ctx, db, d, table)
	if err != nil {
		return err
	}
	if !rows && !meta {
		return fmt.Errorf("no inbox table %s (nor %s_meta) in this database: check --db and --table", table, table)
	}
	return nil
}

// inboxTables reports whether the rows table and the bucketed layout's
// meta table exist.
func inboxTables(ctx context.Context, db *sql.DB, d sqldialect.Dialect, table string) (rows, meta bool, err error) {
	var q string
	switch d {
	case sqldialect.Postgres:
		q = `SELECT to_regclass($1::text) IS NOT NULL, to_regclass($2::text) IS NOT NULL`
	case sqldialect.MySQL:
		q = `SELECT COALESCE(SUM(TABLE_NAME = ?), 0) > 0, COALESCE(SUM(TABLE_NAME = ?), 0) > 0 FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE())`
	default:
		q = `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?), EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)`
	}
	args := []any{table, table + "_meta"}
	if d == sqldialect.MySQL {
		var schema any
		name := table
		if sc, n, ok := strings.Cut(table, "."); ok {
			schema, name = sc, n
		}
		args = []any{name, name + "_meta", schema}
	}
	if err := db.QueryRowContext(ctx, q, args...).Scan(&rows, &meta); err != nil {
		return false, false, fmt.Errorf("read the catalog: %w", err)
	}
	return rows, meta, nil
}
