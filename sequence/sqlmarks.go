package sequence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/ddl"
	"github.com/idem-go/idem/sqldialect"
)

// SQLMarks keeps consumer-side high-water marks (see HighWater for the
// rules) in a SQL table, one row per (consumer, producer, partition), and
// moves a mark inside the caller's transaction, so that the mark and the
// consumer's effect commit or roll back together.
//
// Supported dialects: sqldialect.Postgres, sqldialect.SQLite (3.35 or
// newer), sqldialect.MySQL (MySQL 8 or MariaDB, with or without
// clientFoundRows in the DSN; Advance leaves the session's
// LAST_INSERT_ID() at 18446744073709551615 when the mark existed).
type SQLMarks struct {
	d        sqldialect.Dialect
	consumer string
	table    string
	upsert   string
	read     string
}

// NewSQLMarks returns marks for one consumer (a consumer group or handler
// name: marks are scoped by it, so two consumers of the same messages never
// see each other's marks) stored in dialect d. The only option is
// WithTable. NewSQLMarks does no I/O; create the table with Migrate or with
// the statements SchemaSQL returns.
func NewSQLMarks(d sqldialect.Dialect, consumer string, opts ...Option) (*SQLMarks, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.idleSet {
		return nil, fmt.Errorf("sequence: WithIdleExpiry does not apply to SQLMarks (a consumer's marks must not expire): %w", idem.ErrInvalidOption)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("sequence: %w: %w", err, idem.ErrInvalidOption)
	}
	if err := d.ValidateIdentifier(c.table); err != nil {
		return nil, fmt.Errorf("sequence: table: %w: %w", err, idem.ErrInvalidOption)
	}
	if err := idem.ValidateKey(consumer); err != nil {
		// Stored in every mark row: PostgreSQL's text refuses NUL and
		// invalid UTF-8, so refuse them everywhere, up front.
		return nil, fmt.Errorf("sequence: consumer name: %w: %w", err, idem.ErrInvalidOption)
	}
	m := &SQLMarks{d: d, consumer: consumer, table: c.table}
	m.upsert, m.read = m.statements()
	return m, nil
}

// mysqlFoundID is the insert id the MySQL upsert reports when it found the
// mark: the largest BIGINT UNSIGNED, which no AUTO_INCREMENT value reaches.
const mysqlFoundID = "18446744073709551615"

func (m *SQLMarks) statements() (upsert, read string) {
	p := m.d.Placeholder
	cols := "(consumer, producer_id, partition_id, epoch, seq)"
	switch m.d {
	case sqldialect.MySQL:
		// Assignments run left to right and see earlier ones, so seq is
		// set first while epoch still holds the old value. A new epoch at
		// seq 0 always applies, so epoch's own test needs no seq term.
		// The affected-row count is 1 (inserted), 2 (changed) or 0, but
		// clientFoundRows=true counts an unchanged row 1 too, so the
		// statement also sets its insert id: 0 in the VALUES list, which
		// every attempt evaluates, then mysqlFoundID in seq's test, which
		// only a found row evaluates (the column term keeps it from being
		// folded into a constant). See Advance.
		upsert = "INSERT INTO " + m.table + " " + cols + " VALUES (?, ?, ?, ?, IF(LAST_INSERT_ID(0), NULL, ?)) ON DUPLICATE KEY UPDATE " +
			"seq = IF(LAST_INSERT_ID(" + mysqlFoundID + " + 0 * seq) AND ((epoch = VALUES(epoch) AND seq = ?) OR (epoch < VALUES(epoch) AND VALUES(seq) = 0)), VALUES(seq), seq), " +
			"epoch = IF(epoch < VALUES(epoch) AND VALUES(seq) = 0, VALUES(epoch), epoch)"
	default:
		// PostgreSQL and SQLite: the conflicting row is updated only when
		// the message is the mark's successor, or opens a newer epoch at
		// 0; otherwise no row is affected.
		upsert = "INSERT INTO " + m.table + " AS m " + cols + " VALUES (" + m.d.Placeholders(1, 5) + ") " +
			"ON CONFLICT (consumer, producer_id, partition_id) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq " +
			"WHERE (m.epoch = excluded.epoch AND m.seq = " + p(6) + ") OR (m.epoch < excluded.epoch AND excluded.seq = 0)"
	}
	read = "SELECT epoch, seq FROM " + m.table + " WHERE consumer = " + p(1) + " AND producer_id = " + p(2) + " AND partition_id = " + p(3)
	return upsert, read
}

// SchemaSQL returns the statements that create the marks table (one
// CREATE TABLE IF NOT EXISTS), for migration tools. Migrate runs them.
func (m *SQLMarks) SchemaSQL() []string {
	return []string{m.createTable()}
}

func (m *SQLMarks) createTable() string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + m.table + " (\n")
	switch m.d {
	case sqldialect.Postgres:
		b.WriteString("  consumer     TEXT     NOT NULL,\n  producer_id  BIGINT   NOT NULL,\n  partition_id INTEGER  NOT NULL,\n" +
			"  epoch        SMALLINT NOT NULL,\n  seq          INTEGER  NOT NULL,\n")
	case sqldialect.MySQL:
		// VARBINARY: consumer names compare byte for byte. A VARCHAR's
		// default collation would make "Orders" and "orders " one consumer
		// sharing marks.
		b.WriteString("  consumer     VARBINARY(255) NOT NULL,\n  producer_id  BIGINT         NOT NULL,\n  partition_id INT            NOT NULL,\n" +
			"  epoch        SMALLINT       NOT NULL,\n  seq          INT            NOT NULL,\n")
	default:
		b.WriteString("  consumer     TEXT    NOT NULL,\n  producer_id  INTEGER NOT NULL,\n  partition_id INTEGER NOT NULL,\n" +
			"  epoch        INTEGER NOT NULL,\n  seq          INTEGER NOT NULL,\n")
	}
	b.WriteString("  PRIMARY KEY (consumer, producer_id, partition_id)\n)")
	return b.String()
}

// Migrate creates the marks table if it does not exist, running
// [SQLMarks.SchemaSQL] on db (a *sql.DB, *sql.Conn or *sql.Tx). It is
// idempotent, and several processes may call it at once: on PostgreSQL the
// statements run in one transaction (db's, when db is a *sql.Tx) after a
// transaction-scoped advisory lock.
func (m *SQLMarks) Migrate(ctx context.Context, db sqldialect.Execer) error {
	if err := ddl.Exec(ctx, db, m.d, m.table, m.SchemaSQL()); err != nil {
		return fmt.Errorf("sequence: create table %s: %w", m.table, err)
	}
	return nil
}

// Advance moves the (producer, partition) mark to message (epoch, seq)
// inside tx when the message is next in line, with one conditional upsert,
// and reports applied=true: the caller then applies its effect in the same
// tx. applied=false with a nil error is a duplicate: nothing changed, and
// the caller skips the effect and acknowledges the message. A gap
// (*OutOfOrderError), an older epoch (ErrFenced) or an invalid message
// (ErrInvalidBatch) is an error and changes nothing; see HighWater for the
// rules.
//
// Crash behaviour: the mark is part of tx. If tx rolls back, or the process
// dies before COMMIT completes, neither the mark nor the effect exists and a
// redelivery applies the message. Once tx commits, both exist and every
// redelivery is a duplicate. A COMMIT that fails with an unknown outcome must
// not be acknowledged; the redelivery finds out which happened.
//
// Concurrent Advances of one message in different transactions apply it
// once: the upsert takes the row lock, and the later transaction sees the
// committed mark and reports a duplicate (on PostgreSQL at READ COMMITTED;
// at REPEATABLE READ or above it fails with a serialization error to retry).
func (m *SQLMarks) Advance(ctx context.Context, tx *sql.Tx, producer int64, epoch int16, partition, seq int32) (applied bool, err error) {
	if err := validMessage(producer, epoch, partition, seq); err != nil {
		return false, err
	}
	prev := seq - 1
	if seq == 0 {
		prev = math.MaxInt32
	}
	res, err := tx.ExecContext(ctx, m.upsert, m.consumer, producer, partition, epoch, seq, prev)
	if err != nil {
		return false, fmt.Errorf("sequence: advance mark: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sequence: advance mark: rows affected: %w", err)
	}
	if n == 1 && m.d == sqldialect.MySQL {
		// An insert, or (clientFoundRows=true) a found, unchanged mark.
		id, err := res.LastInsertId()
		if err != nil {
			return false, fmt.Errorf("sequence: advance mark: insert id: %w", err)
		}
		if uint64(id) == math.MaxUint64 {
			n = 0
		}
	}
	if n > 0 {
		return true, nil
	}
	// Not moved: read the mark (locked by the upsert) to say why.
	var mk mark
	err = tx.QueryRowContext(ctx, m.read, m.consumer, producer, partition).Scan(&mk.epoch, &mk.seq)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("sequence: advance mark: upsert affected no row and no mark exists for producer %d partition %d", producer, partition)
	}
	if err != nil {
		return false, fmt.Errorf("sequence: advance mark: read mark: %w", err)
	}
	apply, err := judge(mk, true, epoch, seq)
	if apply {
		return false, fmt.Errorf("sequence: advance mark: producer %d partition %d: mark moved concurrently to epoch %d seq %d; retry the transaction",
			producer, partition, mk.epoch, mk.seq)
	}
	return false, err
}

// Querier is what Mark needs: *sql.DB, *sql.Conn and *sql.Tx have it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Mark reads the (producer, partition) mark: the epoch and sequence of the
// newest applied message, and whether there is one.
func (m *SQLMarks) Mark(ctx context.Context, q Querier, producer int64, partition int32) (epoch int16, seq int32, ok bool, err error) {
	err = q.QueryRowContext(ctx, m.read, m.consumer, producer, partition).Scan(&epoch, &seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, 0, false, nil
	case err != nil:
		return 0, 0, false, fmt.Errorf("sequence: read mark: %w", err)
	}
	return epoch, seq, true, nil
}
