package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
)

// A SQL key store whose table was never created (Migrate not called) is
// not "unavailable, retry later": the middleware answers a 500 whose
// problem names the fix, with no Retry-After, and does not run the
// handler; keystore.Check finds it at start-up. Before, every request got
// a retryable 503 forever.
func TestUnmigratedStore(t *testing.T) {
	t.Parallel()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := keystore.Check(t.Context(), s); !errors.Is(err, keystore.ErrNotMigrated) {
		t.Fatalf("Check of an unmigrated store: %v, want ErrNotMigrated", err)
	}
	m, err := idemhttp.New(s)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Bool
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Store(true) })))
	t.Cleanup(srv.Close)
	code, hdr, body := keyed(t, srv.URL, "/orders", "k")
	var p struct{ Type, Detail string }
	_ = json.Unmarshal([]byte(body), &p)
	if code != http.StatusInternalServerError || hdr.Get("Retry-After") != "" || !strings.HasSuffix(p.Type, "#store-not-migrated") || !strings.Contains(p.Detail, "Migrate") {
		t.Fatalf("unmigrated store: %d Retry-After=%q %s; want 500 store-not-migrated naming Migrate, not retryable", code, hdr.Get("Retry-After"), body)
	}
	if ran.Load() {
		t.Fatal("the handler ran")
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := keystore.Check(t.Context(), s); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}
	if code, _, _ := keyed(t, srv.URL, "/orders", "k"); code != http.StatusOK || !ran.Load() {
		t.Fatalf("after Migrate: %d (ran %v), want the handler's 200", code, ran.Load())
	}
}
