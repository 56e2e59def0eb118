package sqldialect_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/idem-go/idem/sqldialect"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]sqldialect.Dialect{"pgx": sqldialect.Postgres, "PostgreSQL": sqldialect.Postgres, "sqlite3": sqldialect.SQLite, "mariadb": sqldialect.MySQL} {
		if got, err := sqldialect.Parse(name); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := sqldialect.Parse("oracle"); !errors.Is(err, sqldialect.ErrUnknownDialect) || !strings.Contains(err.Error(), "oracle") {
		t.Errorf("Parse(oracle) err = %v", err)
	}
	if err := sqldialect.Dialect(0).Validate(); !errors.Is(err, sqldialect.ErrUnknownDialect) {
		t.Errorf("zero dialect validated: %v", err)
	}
}

func TestPlaceholders(t *testing.T) {
	t.Parallel()
	if got := sqldialect.Postgres.Placeholders(2, 3); got != "$2,$3,$4" {
		t.Errorf("postgres: %q", got)
	}
	if got := sqldialect.MySQL.Placeholders(2, 3); got != "?,?,?" {
		t.Errorf("mysql: %q", got)
	}
}

type pgErr string

func (e pgErr) Error() string    { return "pg " + string(e) }
func (e pgErr) SQLState() string { return string(e) }

type sqliteErr int

func (e sqliteErr) Error() string { return fmt.Sprint("sqlite ", int(e)) }
func (e sqliteErr) Code() int     { return int(e) }

func TestRetryable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("inbox: record key: %w", err) }
	cases := []struct {
		d    sqldialect.Dialect
		err  error
		want bool
	}{
		{sqldialect.Postgres, wrap(pgErr("40001")), true},
		{sqldialect.Postgres, wrap(pgErr("40P01")), true},
		{sqldialect.Postgres, wrap(pgErr("23505")), false},
		{sqldialect.Postgres, errors.New("40001"), false}, // text is never parsed
		{sqldialect.SQLite, wrap(sqliteErr(5)), true},
		{sqldialect.SQLite, wrap(sqliteErr(517)), true}, // SQLITE_BUSY_SNAPSHOT
		{sqldialect.SQLite, wrap(sqliteErr(6)), true},
		{sqldialect.SQLite, wrap(sqliteErr(19)), false},
		{sqldialect.MySQL, wrap(&mysql.MySQLError{Number: 1213}), true},
		{sqldialect.MySQL, errors.Join(errors.New("x"), &mysql.MySQLError{Number: 1205}), true},
		{sqldialect.MySQL, wrap(&mysql.MySQLError{Number: 1062}), false},
		{sqldialect.MySQL, nil, false},
	}
	for _, c := range cases {
		if got := c.d.Retryable(c.err); got != c.want {
			t.Errorf("%v.Retryable(%v) = %v, want %v", c.d, c.err, got, c.want)
		}
	}
	if !sqldialect.MySQL.IsUniqueViolation(&mysql.MySQLError{Number: 1062}) || !sqldialect.Postgres.IsUniqueViolation(pgErr("23505")) || !sqldialect.SQLite.IsUniqueViolation(sqliteErr(1555)) {
		t.Error("unique violations not recognised")
	}
}

func TestValidateIdentifier(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"idem_inbox", "_t", "app.idem_inbox", strings.Repeat("a", 63)} {
		if err := sqldialect.Postgres.ValidateIdentifier(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1t", "t;drop", "a.b.c", `"t"`, "t t", strings.Repeat("a", 64), "a.", "ünïcode"} {
		if err := sqldialect.Postgres.ValidateIdentifier(bad); !errors.Is(err, sqldialect.ErrInvalidIdentifier) {
			t.Errorf("%q accepted (err %v)", bad, err)
		}
	}
	if err := sqldialect.SQLite.ValidateIdentifier("main.t"); err == nil {
		t.Error("SQLite accepted a schema-qualified name")
	}
}

// FuzzValidateIdentifier: whatever is accepted is safe to splice into SQL.
func FuzzValidateIdentifier(f *testing.F) {
	for _, s := range []string{"idem_inbox", "a.b", "x;--", "", "1", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sqldialect.Postgres.ValidateIdentifier(s) != nil {
			return
		}
		for _, r := range s {
			if !(r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				t.Fatalf("accepted %q containing %q", s, r)
			}
		}
		if len(s) == 0 || len(s) > 127 || strings.Count(s, ".") > 1 {
			t.Fatalf("accepted %q", s)
		}
	})
}
