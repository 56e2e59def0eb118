package inbox_test

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testenv"
)

// TestScaleMariaDBRowShape measures, on MariaDB/MySQL, the row shape a
// bucketed layout would use there (a BINARY(16) digest primary key with
// nullable fingerprint and key columns, as on SQLite and PostgreSQL) beside
// today's rows layout and a bare BINARY(16) table, with IDEM_SCALE_MARIADB
// random keys each (20k by default), in one run. The bucketed layout is not
// available on MySQL yet; this is the evidence for its row shape. Prints
//
//	mariadb,<table>,keys,0,1,bytes_per_key
func TestScaleMariaDBRowShape(t *testing.T) {
	n := envInt("IDEM_SCALE_MARIADB", 20_000)
	db := testenv.MySQL(t)
	report := scaleReport(t)
	shapes := []struct{ name, ddl string }{
		{"bare-binary16", "CREATE TABLE shape_bare (d BINARY(16) NOT NULL PRIMARY KEY) ENGINE=InnoDB"},
		{"bucket-shape", "CREATE TABLE shape_bucket (d BINARY(16) NOT NULL PRIMARY KEY, fingerprint VARBINARY(64) NULL, idem_key VARBINARY(255) NULL) ENGINE=InnoDB"},
		{"rows-layout", "CREATE TABLE shape_rows (consumer VARBINARY(255) NOT NULL, idem_key VARBINARY(255) NOT NULL, fingerprint VARBINARY(64) NULL, processed_at DATETIME(6) NOT NULL, PRIMARY KEY (consumer, idem_key), KEY shape_rows_processed_at (consumer, processed_at)) ENGINE=InnoDB"},
	}
	for _, s := range shapes {
		if _, err := db.Exec(s.ddl); err != nil {
			t.Fatal(err)
		}
	}
	const batch = 1000
	for done := 0; done < n; done += batch {
		var bare, bucket, rows strings.Builder
		var a1, a2 []any
		for i := 0; i < batch; i++ {
			var d [16]byte
			_, _ = rand.Read(d[:])
			sep := ","
			if i == 0 {
				sep = ""
			}
			bare.WriteString(sep + "(?)")
			bucket.WriteString(sep + "(?, NULL, NULL)")
			rows.WriteString(sep + "('scale', ?, NULL, UTC_TIMESTAMP(6))")
			a1 = append(a1, d[:])
			a2 = append(a2, uuidV4())
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{"INSERT INTO shape_bare (d) VALUES " + bare.String(), a1},
			{"INSERT INTO shape_bucket (d, fingerprint, idem_key) VALUES " + bucket.String(), a1},
			{"INSERT INTO shape_rows (consumer, idem_key, fingerprint, processed_at) VALUES " + rows.String(), a2},
		} {
			if _, err := db.Exec(q.sql, q.args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range shapes {
		table := "shape_" + strings.SplitN(s.name, "-", 2)[0]
		if _, err := db.Exec("ANALYZE TABLE " + table); err != nil {
			t.Fatal(err)
		}
		var b int64
		if err := db.QueryRow("SELECT data_length + index_length FROM information_schema.TABLES WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if b == 0 {
			t.Fatalf("%s: no size", table)
		}
		report(fmt.Sprintf("mariadb,%s,%d,0,1,%.1f", s.name, n, float64(b)/float64(n)))
	}
}
