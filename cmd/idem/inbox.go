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
		Short: "Show or forget one key of an inbox table, to re-run one message on purpose",
		Long: `inbox shows an operator one key the inbox recorded, and forgets it when one
message must be re-run on purpose.

  idem inbox show KEY --consumer C      is KEY recorded for consumer C, where, with which fingerprint
  idem inbox forget KEY --consumer C    delete the record: the next delivery of KEY runs its handler again

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
	cmd.AddCommand(newInboxShow(&f), newInboxForget(&f))
	return cmd
}

func newInboxShow(f *inboxFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show KEY --consumer C --db DB",
		Short: "Show whether KEY is recorded, and where",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withInbox(cmd, f, "show", func(ctx context.Context, in *inbox.Inbox) error {
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
			return withInbox(cmd, f, "forget", func(ctx context.Context, in *inbox.Inbox) error {
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
func withInbox(cmd *cobra.Command, f *inboxFlags, verb string, fn func(ctx context.Context, in *inbox.Inbox) error) error {
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
		in, err := inbox.New(db, d, f.consumer, inbox.WithTable(f.table))
		if err != nil {
			return err
		}
		defer in.Close()
		return fn(ctx, in)
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
	var q string
	switch d {
	case sqldialect.Postgres:
		q = `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1::text) OR oid = to_regclass($2::text)`
	case sqldialect.MySQL:
		q = `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME IN (?, ?)`
	default:
		q = `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)`
	}
	args := []any{table, table + "_meta"}
	if d == sqldialect.MySQL {
		var schema any
		name := table
		if sc, n, ok := strings.Cut(table, "."); ok {
			schema, name = sc, n
		}
		args = []any{schema, name, name + "_meta"}
	}
	var n int
	if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return fmt.Errorf("read the catalog: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("no inbox table %s (nor %s_meta) in this database: check --db and --table", table, table)
	}
	return nil
}
