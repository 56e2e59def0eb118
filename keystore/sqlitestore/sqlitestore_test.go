package sqlitestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/keystore/storetest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func open(t *testing.T, opts ...sqlstore.Option) *sqlitestore.Store {
	return dbtest.SQLiteStore(t, "", opts...)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store { return open(t) })
}

// Close also closes the database, and a second Close returns the first's
// result (the conformance suite checks the rest of Close).
func TestCloseClosesDatabase(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(s.Close(), s.Close()); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping after Close: the database is still open")
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		path string
		opt  sqlstore.Option
	}{
		{"", nil}, {filepath.Join(dir, "a.db?mode=ro"), nil},
		{filepath.Join(dir, "b.db"), sqlstore.WithTable("main.keys")},
		{filepath.Join(dir, "c.db"), sqlstore.WithMaxResultSize(-1)},
	} {
		var opts []sqlstore.Option
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		if s, err := sqlitestore.Open(tc.path, opts...); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", tc.path, err)
			if s != nil {
				s.Close()
			}
		}
	}
}
