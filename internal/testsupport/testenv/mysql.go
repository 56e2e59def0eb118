package testenv

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idem-go/idem/internal/testsupport/testport"
)

const mysqlInstall = "apt-get install -y mariadb-server"

var my shared[*mysql.Config] // the root user's configuration

// MySQLDSN returns the DSN of a fresh, empty database on a MariaDB (or
// MySQL) server, starting the server on first use. The database is dropped
// when t ends. The DSN sets parseTime and multiStatements off.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	admin := my.get(t, "MariaDB", mysqlInstall, startMySQL)
	c := admin.Clone()
	c.DBName = scratch(t, "mysql", admin.FormatDSN(), "CREATE DATABASE %s", "DROP DATABASE %s")
	return c.FormatDSN()
}

// MySQL returns a *sql.DB (driver "mysql") on a fresh database; see
// [MySQLDSN].
func MySQL(t testing.TB) *sql.DB {
	t.Helper()
	return Open(t, "mysql", MySQLDSN(t))
}

// MySQLWith is [MySQL] with extra go-sql-driver DSN parameters appended,
// such as "clientFoundRows=true".
func MySQLWith(t testing.TB, params string) *sql.DB {
	t.Helper()
	dsn := MySQLDSN(t)
	if strings.Contains(dsn, "?") {
		dsn += "&" + params
	} else {
		dsn += "?" + params
	}
	return Open(t, "mysql", dsn)
}

// quiet drops the driver's own log lines ("unexpected EOF" when a test kills
// a connection on purpose); errors still reach the caller.
type quiet struct{}

func (quiet) Print(...any) {}

func startMySQL() (*mysql.Config, error) {
	_ = mysql.SetLogger(quiet{})
	if dsn := os.Getenv("IDEM_TEST_MYSQL"); dsn != "" {
		return mysql.ParseDSN(dsn)
	}
	dirs := []string{"/usr/sbin", "/usr/bin"}
	server, err := findBinary("mariadbd", dirs...)
	if err != nil {
		if server, err = findBinary("mysqld", dirs...); err != nil {
			return nil, err
		}
	}
	install, err := findBinary("mariadb-install-db", dirs...)
	if err != nil {
		if install, err = findBinary("mysql_install_db", dirs...); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "idem-mysql-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	u := "--user=" + currentUser()
	if err := runToEnd(dir, nil, install, "--no-defaults", "--datadir="+data, u, "--auth-root-authentication-method=normal", "--skip-test-db"); err != nil {
		return nil, err
	}
	// Temporary tables and sort files go to a directory of the server's
	// own, not /tmp, which other tests (and their cleanups) share.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	port, err := testport.Free()
	if err != nil {
		return nil, err
	}
	s, err := start(dir, nil, server, "--no-defaults", "--datadir="+data, u, "--tmpdir="+tmp,
		"--port="+fmt.Sprint(port), "--bind-address=127.0.0.1", "--socket="+filepath.Join(dir, "mysqld.sock"),
		"--pid-file="+filepath.Join(dir, "mysqld.pid"), "--skip-log-bin", "--innodb-buffer-pool-size=128M",
		"--innodb-flush-log-at-trx-commit=1", "--max-connections=300", "--skip-name-resolve")
	if err != nil {
		return nil, err
	}
	c := mysql.NewConfig()
	c.User = "root"
	c.Net = "tcp"
	c.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := waitDB(db, s, 60*time.Second); err != nil {
		s.stop(syscall.SIGTERM)
		return nil, err
	}
	onStop(func() { s.stop(syscall.SIGTERM) })
	return c, nil
}

func currentUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "mysql"
}
