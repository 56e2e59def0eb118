package testenv_test

import (
	"database/sql"
	"os"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// Every server starts (or is found) and answers; the databases run with
// the settings idem's tests rely on.
func TestServers(t *testing.T) {
	for _, c := range []struct {
		name  string
		db    func(testing.TB) *sql.DB
		query string
		want  string // "" logs the answer instead
	}{
		{"postgres", testenv.Postgres, "SHOW fsync", "on"},
		{"mysql", testenv.MySQL, "SELECT VERSION()", ""},
		{"sqlite", testenv.SQLite, "PRAGMA journal_mode", "wal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got string
			if err := c.db(t).QueryRow(c.query).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				t.Logf("%s: %s", c.query, got)
			} else if got != c.want {
				t.Fatalf("%s = %q, want %q", c.query, got, c.want)
			}
		})
	}
	for _, c := range []struct {
		name string
		addr func(testing.TB) string
	}{
		{"rabbitmq", testenv.RabbitMQURL},
		{"redis", testenv.RedisAddr},
		{"dynamodb", testenv.DynamoDBEndpoint},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.addr(t) == "" {
				t.Fatal("no address")
			}
		})
	}
}
