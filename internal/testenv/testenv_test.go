package testenv_test

import (
	"os"
	"testing"

	"github.com/idem-go/idem/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func TestServers(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		db := testenv.Postgres(t)
		var fsync string
		if err := db.QueryRow("SHOW fsync").Scan(&fsync); err != nil {
			t.Fatal(err)
		}
		if fsync != "on" {
			t.Fatalf("fsync = %q, want on", fsync)
		}
	})
	t.Run("mysql", func(t *testing.T) {
		db := testenv.MySQL(t)
		var v string
		if err := db.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
			t.Fatal(err)
		}
		t.Log("server", v)
	})
	t.Run("sqlite", func(t *testing.T) {
		db := testenv.SQLite(t)
		var mode string
		if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" {
			t.Fatalf("journal_mode = %q, want wal", mode)
		}
	})
	t.Run("rabbitmq", func(t *testing.T) {
		if u := testenv.RabbitMQURL(t); u == "" {
			t.Fatal("no URL")
		}
	})
	t.Run("redis", func(t *testing.T) {
		if addr := testenv.RedisAddr(t); addr == "" {
			t.Fatal("no address")
		}
	})
}
