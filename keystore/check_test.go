package keystore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	ms, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	if err := keystore.Check(t.Context(), ms); err != nil {
		t.Errorf("memstore: %v", err)
	}
	if err := keystore.Check(t.Context(), noExtend{ms}); err != nil {
		t.Errorf("a store that is no Inspector: %v, want nil (checked by its first call)", err)
	}
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(t.TempDir(), "k.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlstore.New(db, sqldialect.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if err := keystore.Check(t.Context(), s); !errors.Is(err, keystore.ErrNotMigrated) {
		t.Errorf("unmigrated: %v, want ErrNotMigrated", err)
	}
	if _, err := s.Reserve(t.Context(), "k", nil, 1e9); !errors.Is(err, keystore.ErrNotMigrated) {
		t.Errorf("Reserve on an unmigrated store: %v, want ErrNotMigrated", err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := keystore.Check(t.Context(), s); err != nil {
		t.Errorf("migrated: %v", err)
	}
	db.Close()
	if err := keystore.Check(t.Context(), s); err == nil || errors.Is(err, keystore.ErrNotMigrated) {
		t.Errorf("closed database: %v, want its error", err)
	}
}
