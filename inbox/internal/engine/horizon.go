package engine

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idem-go/idem/sqldialect"
)

// Horizon is the horizon table's SQL: each consumer's redelivery horizon,
// recorded next to the key table t as t + "_horizon", in t's schema. The
// inbox writes it; every engine's Sweep reads it.
type Horizon struct {
	Table  string
	Schema string // CREATE TABLE IF NOT EXISTS
	Raise  string // (consumer, horizon µs) → stored horizon = max(stored, given)
	Set    string // (consumer, horizon µs) → stored horizon = given
	Read   string // (consumer) → stored horizon µs, NULL if none
}

// NewHorizon builds the horizon table's SQL for the key table t.
func NewHorizon(d sqldialect.Dialect, t string) Horizon {
	h := Horizon{Table: t + "_horizon"}
	n := h.Table
	// MAX: a horizon table made by hand without its primary key may hold
	// several rows for a consumer; the largest binds.
	h.Read = `SELECT MAX(horizon_us) FROM ` + n + ` WHERE consumer = ` + d.Placeholder(1)
	switch d {
	case sqldialect.Postgres:
		h.Schema = `CREATE TABLE IF NOT EXISTS ` + n + ` (
	consumer   text        PRIMARY KEY,
	horizon_us bigint      NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
)`
		ins := `INSERT INTO ` + n + ` (consumer, horizon_us, updated_at) VALUES ($1, $2, now()) ON CONFLICT (consumer) DO UPDATE SET horizon_us = excluded.horizon_us, updated_at = now()`
		h.Set = ins
		h.Raise = ins + ` WHERE ` + TableRef(n) + `.horizon_us < excluded.horizon_us`
	case sqldialect.SQLite:
		h.Schema = `CREATE TABLE IF NOT EXISTS ` + n + ` (
	consumer   TEXT    PRIMARY KEY,
	horizon_us INTEGER NOT NULL,
	updated_at INTEGER NOT NULL -- Unix milliseconds, SQLite's clock
) WITHOUT ROWID`
		ins := `INSERT INTO ` + n + ` (consumer, horizon_us, updated_at) VALUES (?1, ?2, ` + SQLiteNowMS + `) ON CONFLICT (consumer) DO UPDATE SET horizon_us = excluded.horizon_us, updated_at = excluded.updated_at`
		h.Set = ins
		h.Raise = ins + ` WHERE ` + n + `.horizon_us < excluded.horizon_us`
	case sqldialect.MySQL:
		h.Schema = `CREATE TABLE IF NOT EXISTS ` + n + ` (
	consumer   VARBINARY(255) NOT NULL PRIMARY KEY,
	horizon_us BIGINT         NOT NULL,
	updated_at DATETIME(6)    NOT NULL
) ENGINE=InnoDB`
		ins := `INSERT INTO ` + n + ` (consumer, horizon_us, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE `
		h.Set = ins + `horizon_us = VALUES(horizon_us), updated_at = VALUES(updated_at)`
		// Assignments run left to right: updated_at tests the old value.
		h.Raise = ins + `updated_at = IF(horizon_us < VALUES(horizon_us), VALUES(updated_at), updated_at), horizon_us = GREATEST(horizon_us, VALUES(horizon_us))`
	}
	return h
}

// Stored reads consumer's recorded horizon inside tx; 0 if none is
// recorded.
func (h Horizon) Stored(ctx context.Context, tx *sql.Tx, consumer string) (time.Duration, error) {
	var us sql.NullInt64
	if err := tx.QueryRowContext(ctx, h.Read, consumer).Scan(&us); err != nil {
		return 0, fmt.Errorf("inbox: sweep: read the redelivery horizon from %s (apply SchemaSQL or call Migrate): %w", h.Table, err)
	}
	return time.Duration(us.Int64) * time.Microsecond, nil
}

// CheckTable returns an error wrapping ErrHorizon when olderThan is below
// the largest horizon any consumer of the table recorded (a bucket holds
// every consumer's keys).
func (h Horizon) CheckTable(ctx context.Context, tx *sql.Tx, olderThan time.Duration) error {
	var us sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(horizon_us) FROM `+h.Table).Scan(&us); err != nil {
		return fmt.Errorf("inbox: sweep: read the redelivery horizons from %s (apply SchemaSQL or call Migrate): %w", h.Table, err)
	}
	if d := time.Duration(us.Int64) * time.Microsecond; olderThan < d {
		return fmt.Errorf("inbox: asked to delete keys older than %v, the largest horizon recorded in %s (bucket tables hold every consumer's keys) is %v: %w", olderThan, h.Table, d, ErrHorizon)
	}
	return nil
}
