package versiongate

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/sqldialect"
)

// Gate writes rows of one table only when their version increases. It is safe
// for concurrent use.
type Gate struct {
	d       sqldialect.Dialect
	columns []string
	update  string
	upsert  string
}

// Table describes the table a Gate writes. The table and its unique key on ID
// belong to the application; the gate does not create them.
type Table struct {
	// Name is the table, optionally schema.table (PostgreSQL, MySQL).
	Name string
	// ID is the entity's key column; it must be the primary key or unique,
	// for Upsert.
	ID string
	// Version is an integer column holding the applied version.
	Version string
	// Columns are the value columns an update sets, in the order the values
	// are passed to Update and Upsert.
	Columns []string
}

// New returns a Gate for t. Every name must be a plain identifier.
func New(d sqldialect.Dialect, t Table) (*Gate, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("versiongate: %w", err)
	}
	if err := d.ValidateIdentifier(t.Name); err != nil {
		return nil, fmt.Errorf("versiongate: table: %v: %w", err, idem.ErrInvalidOption)
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("versiongate: no value columns: %w", idem.ErrInvalidOption)
	}
	seen := map[string]bool{}
	for _, c := range append([]string{t.ID, t.Version}, t.Columns...) {
		if err := sqldialect.SQLite.ValidateIdentifier(c); err != nil {
			return nil, fmt.Errorf("versiongate: column: %v: %w", err, idem.ErrInvalidOption)
		}
		if seen[strings.ToLower(c)] {
			return nil, fmt.Errorf("versiongate: column %q named twice: %w", c, idem.ErrInvalidOption)
		}
		seen[strings.ToLower(c)] = true
	}
	g := &Gate{d: d, columns: append([]string(nil), t.Columns...)}
	g.update, g.upsert = build(d, t)
	return g, nil
}

func build(d sqldialect.Dialect, t Table) (update, upsert string) {
	p := d.Placeholder
	n := len(t.Columns)
	// Arguments: values 1..n, version n+1, id n+2.
	var set []string
	for i, c := range t.Columns {
		set = append(set, c+" = "+p(i+1))
	}
	vp, ip := p(n+1), p(n+2)
	if d != sqldialect.Postgres { // positional ?: repeat the version argument
		update = "UPDATE " + t.Name + " SET " + strings.Join(set, ", ") + ", " + t.Version + " = ? WHERE " + t.ID + " = ? AND " + t.Version + " < ?"
	} else {
		update = "UPDATE " + t.Name + " SET " + strings.Join(set, ", ") + ", " + t.Version + " = " + vp + " WHERE " + t.ID + " = " + ip + " AND " + t.Version + " < " + vp
	}
	cols := t.ID + ", " + t.Version + ", " + strings.Join(t.Columns, ", ")
	// Upsert arguments: id 1, version 2, values 3..n+2.
	vals := d.Placeholders(1, n+2)
	switch d {
	case sqldialect.Postgres, sqldialect.SQLite:
		var ex []string
		for _, c := range t.Columns {
			ex = append(ex, c+" = excluded."+c)
		}
		upsert = "INSERT INTO " + t.Name + " (" + cols + ") VALUES (" + vals + ") ON CONFLICT (" + t.ID + ") DO UPDATE SET " +
			strings.Join(ex, ", ") + ", " + t.Version + " = excluded." + t.Version + " WHERE " + tableRef(t.Name) + "." + t.Version + " < excluded." + t.Version
	case sqldialect.MySQL:
		// MySQL evaluates the assignments left to right, so the version
		// column, which the others test, is assigned last. The affected-row
		// count alone cannot tell an insert from a found, unchanged row:
		// under clientFoundRows=true both count 1. So the statement also
		// sets its insert id: LAST_INSERT_ID(0) in the VALUES list, which
		// every row attempt evaluates, then LAST_INSERT_ID(dupMarker) in the
		// version's test, which only a found row evaluates (the column term
		// keeps it from being folded into a constant at prepare time). See
		// mysqlApplied.
		var ex []string
		newer := t.Version + " < VALUES(" + t.Version + ")"
		for _, c := range t.Columns {
			ex = append(ex, c+" = IF("+newer+", VALUES("+c+"), "+c+")")
		}
		ex = append(ex, t.Version+" = IF(LAST_INSERT_ID("+dupMarker+" + 0 * "+t.Version+") AND "+newer+", VALUES("+t.Version+"), "+t.Version+")")
		vals = "?, IF(LAST_INSERT_ID(0), NULL, ?)"
		if n > 0 {
			vals += ", " + d.Placeholders(3, n)
		}
		upsert = "INSERT INTO " + t.Name + " (" + cols + ") VALUES (" + vals + ") ON DUPLICATE KEY UPDATE " + strings.Join(ex, ", ")
	}
	return update, upsert
}

// tableRef is how the ON CONFLICT clause names the existing row: the table's
// own name, without its schema.
func tableRef(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return name
}

func (g *Gate) check(values []any) error {
	if len(values) != len(g.columns) {
		return fmt.Errorf("versiongate: %d values for %d columns %v: %w", len(values), len(g.columns), g.columns, idem.ErrInvalidArgument)
	}
	return nil
}

// Update sets the value columns of the row id to values and its version to
// version, only if the stored version is lower. applied is false when the row
// is missing or its version is equal or newer: a duplicate or a stale
// message, which the caller acknowledges.
func (g *Gate) Update(ctx context.Context, ex sqldialect.Execer, id any, version int64, values ...any) (applied bool, err error) {
	if err := g.check(values); err != nil {
		return false, err
	}
	var args []any
	if g.d == sqldialect.Postgres {
		args = append(append(args, values...), version, id)
	} else {
		args = append(append(args, values...), version, id, version)
	}
	return affected(ex.ExecContext(ctx, g.update, args...))
}

// Upsert inserts the row when it does not exist, or updates it as Update
// does when version is newer than the stored one. applied is false when the
// stored version is equal or newer.
//
// On MySQL the outcome is read from the affected-row count and the insert
// id, so it is right with or without clientFoundRows=true in the DSN; a
// side effect is that, when the row existed, the session's
// LAST_INSERT_ID() is left at 18446744073709551615 (read your own
// AUTO_INCREMENT id before calling Upsert).
func (g *Gate) Upsert(ctx context.Context, ex sqldialect.Execer, id any, version int64, values ...any) (applied bool, err error) {
	if err := g.check(values); err != nil {
		return false, err
	}
	args := append([]any{id, version}, values...)
	if g.d == sqldialect.MySQL {
		return mysqlApplied(ex.ExecContext(ctx, g.upsert, args...))
	}
	return affected(ex.ExecContext(ctx, g.upsert, args...))
}

// dupMarker is the insert id a MySQL upsert reports when it found the row:
// the largest BIGINT UNSIGNED, which no AUTO_INCREMENT column reaches (an
// insert reports 0, or its AUTO_INCREMENT value).
const dupMarker = "18446744073709551615"

// mysqlApplied reads a MySQL upsert's outcome whatever the DSN's
// clientFoundRows says: 2 affected rows is a changed row; 1 is an insert,
// unless the insert id is dupMarker (then a found, unchanged row, counted by
// clientFoundRows=true); 0 is a found, unchanged row.
func mysqlApplied(res sql.Result, err error) (bool, error) {
	n, err := rowsAffected(res, err)
	if err != nil || n != 1 {
		return n == 2, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return false, fmt.Errorf("versiongate: insert id: %w", err)
	}
	return uint64(id) != math.MaxUint64, nil
}

func affected(res sql.Result, err error) (bool, error) {
	n, err := rowsAffected(res, err)
	return n > 0, err
}

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, fmt.Errorf("versiongate: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("versiongate: rows affected: %w", err)
	}
	return n, nil
}
