package testenv

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver

	"github.com/idem-go/idem/internal/testsupport/testport"
)

const pgInstall = "apt-get install -y postgresql"

var pg = envServer{what: "PostgreSQL", install: pgInstall, env: "IDEM_TEST_POSTGRES", start: startPostgres} // URL of the superuser's "postgres" database

// PostgresURL returns the URL of a fresh, empty schema (set as the
// search_path) on a PostgreSQL server with fsync on, starting the server on
// first use. The schema is dropped when t ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := pg.get(t)
	schema := scratch(t, "pgx", admin, "CREATE SCHEMA %s", "DROP SCHEMA %s CASCADE")
	u, _ := url.Parse(admin)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Postgres returns a *sql.DB (driver "pgx") on a fresh schema; see
// [PostgresURL].
func Postgres(t testing.TB) *sql.DB {
	t.Helper()
	return Open(t, "pgx", PostgresURL(t))
}

func startPostgres() (string, error) {
	dirs := []string{"/usr/lib/postgresql/*/bin"}
	initdb, err := findBinary("initdb", dirs...)
	if err != nil {
		return "", err
	}
	postgres, err := findBinary("postgres", dirs...)
	if err != nil {
		return "", err
	}
	cred, err := unprivileged("postgres", "nobody")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "idem-pg-")
	if err != nil {
		return "", err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return "", err
	}
	if cred != nil {
		for _, p := range []string{dir, data} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return "", err
			}
		}
	}
	// initdb: --no-sync only speeds up creating the cluster; the server
	// below runs with fsync on, as production does.
	if err := runToEnd(dir, cred, initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return "", err
	}
	port, err := testport.Free()
	if err != nil {
		return "", err
	}
	s, err := start(dir, cred, postgres, "-D", data, "-p", fmt.Sprint(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "max_connections=300",
		"-c", "shared_buffers=128MB", "-c", "max_prepared_transactions=0")
	if err != nil {
		return "", err
	}
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("pgx", admin)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if err := waitDB(db, s, 30*time.Second); err != nil {
		s.stop(syscall.SIGINT)
		return "", err
	}
	onStop(func() { s.stop(syscall.SIGINT) }) // fast shutdown
	return admin, nil
}
