package inbox

import (
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-go/idem/sqldialect"
)

// A COMMIT that failed with a rollback the server reports (Galera's
// certification failure is 1213 at COMMIT) is retried; any other COMMIT
// failure stays an unknown outcome.
func TestCommitRolledBack(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		d    sqldialect.Dialect
		err  error
		want bool
	}{
		{"galera certification failure", sqldialect.MySQL, &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}, true},
		{"mysql lock wait timeout", sqldialect.MySQL, &mysql.MySQLError{Number: 1205}, false},
		{"mysql broken connection", sqldialect.MySQL, mysql.ErrInvalidConn, false},
		{"postgres serialization failure", sqldialect.Postgres, &pgconn.PgError{Code: "40001"}, true},
		{"postgres connection closed", sqldialect.Postgres, errors.New("conn closed"), false},
		{"sqlite busy", sqldialect.SQLite, errors.New("database is locked (5) (SQLITE_BUSY)"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := rolledBack(c.d, &CommitError{Key: "k", Err: c.err}); got != c.want {
				t.Errorf("rolledBack = %v, want %v", got, c.want)
			}
		})
	}
}
