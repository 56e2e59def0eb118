package inbox_test

import (
	"database/sql"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// The MariaDB side of the scale tests (TestScaleCurve, TestScaleRetire):
// IDEM_SCALE_ENGINES names "mariadb" beside "sqlite" and "postgres".

var scaleDialects = map[string]sqldialect.Dialect{"sqlite": sqldialect.SQLite, "postgres": sqldialect.Postgres, "mariadb": sqldialect.MySQL}

// scaleEngines is IDEM_SCALE_ENGINES, or every engine.
func scaleEngines() []string {
	e := strings.Split(os.Getenv("IDEM_SCALE_ENGINES"), ",")
	if e[0] == "" {
		return []string{"sqlite", "postgres", "mariadb"}
	}
	return e
}

// openScaleMariaDB opens a fresh database. IDEM_SCALE_MARIADB_POOL_MB
// resizes the server's buffer pool first (the page cache sized to the
// working set that docs/inbox.md recommends; the test server starts with
// 128 MiB).
func openScaleMariaDB(t *testing.T) *sql.DB {
	db := testenv.MySQL(t)
	if mb := envInt("IDEM_SCALE_MARIADB_POOL_MB", 0); mb > 0 {
		if _, err := db.Exec("SET GLOBAL innodb_buffer_pool_size = ?", int64(mb)<<20); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// mariadbBytes is a table's clustered index plus secondary indexes, from
// fresh statistics.
func mariadbBytes(db *sql.DB, table string) (int64, error) {
	if _, err := db.Exec("ANALYZE TABLE " + table); err != nil {
		return 0, err
	}
	var b int64
	err := db.QueryRow("SELECT data_length + index_length FROM information_schema.TABLES WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&b)
	return b, err
}

// mariadbBare is goal 2's baseline: bytes per row of a table keyed by a
// BINARY(16) and nothing else, filled with n random keys in random order,
// in the same run.
func mariadbBare(t *testing.T, db *sql.DB, n int) float64 {
	t.Helper()
	if _, err := db.Exec("CREATE TABLE bare (d BINARY(16) NOT NULL PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; done += 100_000 {
		// RANDOM_BYTES and the seq_ tables are MariaDB's (10.10+).
		if _, err := db.Exec("INSERT INTO bare SELECT RANDOM_BYTES(16) FROM seq_1_to_" + strconv.Itoa(min(100_000, n-done))); err != nil {
			t.Fatal(err)
		}
	}
	b, err := mariadbBytes(db, "bare")
	if err != nil {
		t.Fatal(err)
	}
	return float64(b) / float64(n)
}
