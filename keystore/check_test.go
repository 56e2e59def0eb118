package keystore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	ms := dbtest.MemStore(t)
	if err := keystore.Check(t.Context(), ms); err != nil {
		t.Errorf("memstore: %v", err)
	}
	if err := keystore.Check(t.Context(), noExtend{ms}); err != nil {
		t.Errorf("a store that is no Inspector: %v, want nil (checked by its first call)", err)
	}
	db := testenv.SQLite(t)
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
