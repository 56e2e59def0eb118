package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
	"github.com/redis/go-redis/v9"
)

const testAdminToken = "s3cret-admin-token-0123456789"

// adminCall sends one request to the admin API at base with the bearer
// token (none if empty) and returns the status and body.
func adminCall(t *testing.T, method, base, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// checkAdminKeys exercises the admin API at base over s: refused without a
// token and with a wrong one (changing nothing), and list, show, a stale
// release refused, the holder's release and forget with the right one.
func checkAdminKeys(t *testing.T, base string, s keystore.Store) {
	ctx := context.Background()
	old, _ := s.Reserve(ctx, "stuck/1", nil, time.Hour)
	if err := s.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Reserve(ctx, "stuck/1", nil, time.Hour)
	if err != nil || cur.State != keystore.Acquired {
		t.Fatalf("Reserve: %v %v", cur.State, err)
	}
	done, _ := s.Reserve(ctx, "done", nil, time.Hour)
	if err := s.Complete(ctx, done, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	key := "/admin/keys/" + url.PathEscape("stuck/1")
	release := key + "/release?token=" + strconv.FormatUint(cur.Token, 10)
	for _, tok := range []string{"", "wrong-token-wrong-token-wrong", testAdminToken + "x"} {
		for _, r := range [][2]string{{"GET", "/admin/keys"}, {"GET", key}, {"POST", release}, {"POST", "/admin/keys/done/forget"}} {
			if code, body := adminCall(t, r[0], base, r[1], tok); code != http.StatusUnauthorized || strings.Contains(body, "stuck") {
				t.Fatalf("%s %s with token %q: %d %s, want 401 and nothing disclosed", r[0], r[1], tok, code, body)
			}
		}
	}
	if c, _ := s.Reserve(ctx, "stuck/1", nil, time.Hour); c.State != keystore.InProgress {
		t.Fatalf("after refused requests the key is %v, want still in progress", c.State)
	}

	code, body := adminCall(t, "GET", base, "/admin/keys?state=in_progress", testAdminToken)
	var page struct {
		Keys []keyView `json:"keys"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &page) != nil || len(page.Keys) != 1 || page.Keys[0].Key != "stuck/1" || page.Keys[0].Token != cur.Token {
		t.Fatalf("list: %d %s, want the one lease", code, body)
	}
	code, body = adminCall(t, "GET", base, key, testAdminToken)
	var v keyView
	if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || v.State != "in_progress" || v.Token != cur.Token {
		t.Fatalf("show: %d %s", code, body)
	}
	if code, _ := adminCall(t, "GET", base, "/admin/keys/absent", testAdminToken); code != http.StatusNotFound {
		t.Fatalf("show of an absent key: %d, want 404", code)
	}
	stale := key + "/release?token=" + strconv.FormatUint(old.Token, 10)
	if code, body := adminCall(t, "POST", base, stale, testAdminToken); code != http.StatusConflict || !strings.Contains(body, "refused") {
		t.Fatalf("release with a stale token: %d %s, want 409", code, body)
	}
	if c, _ := s.Reserve(ctx, "stuck/1", nil, time.Hour); c.State != keystore.InProgress {
		t.Fatalf("after a stale release the key is %v, want still in progress", c.State)
	}
	if code, body := adminCall(t, "POST", base, release, testAdminToken); code != http.StatusOK {
		t.Fatalf("release with the holder's token: %d %s", code, body)
	}
	if c, _ := s.Reserve(ctx, "stuck/1", nil, time.Hour); c.State != keystore.Acquired {
		t.Fatalf("after the release the key is %v, want free", c.State)
	}
	if code, body := adminCall(t, "POST", base, "/admin/keys/done/forget", testAdminToken); code != http.StatusOK {
		t.Fatalf("forget: %d %s", code, body)
	}
	if c, _ := s.Reserve(ctx, "done", nil, time.Hour); c.State != keystore.Acquired {
		t.Fatalf("after forget the key is %v, want free", c.State)
	}
}

func TestAdminKeysHandler(t *testing.T) {
	t.Parallel()
	s := storetest.NewRefStore()
	srv := httptest.NewServer(adminKeys(s, []byte(testAdminToken), slog.New(slog.DiscardHandler)))
	defer srv.Close()
	checkAdminKeys(t, srv.URL, s)
}

func TestAdminTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("tiny\n"), 0o600)
	if _, err := readAdminToken(short); err == nil {
		t.Fatal("a 4-byte token was accepted")
	}
	good := filepath.Join(dir, "good")
	_ = os.WriteFile(good, []byte("  "+testAdminToken+"\n"), 0o600)
	if b, err := readAdminToken(good); err != nil || string(b) != testAdminToken {
		t.Fatalf("readAdminToken: %q %v", b, err)
	}
}

// TestServeAdminKeys runs idem serve with --admin-token-file on Redis and
// checks the key API on its admin listener; without the flag it is off.
func TestServeAdminKeys(t *testing.T) {
	t.Parallel()
	store := "redis://" + testenv.RedisAddr(t) + "/10"
	up := newUpstream(t)
	off := startServe(t, up.srv.URL, store)
	if code, _ := adminCall(t, "GET", off.admin, "/admin/keys", testAdminToken); code != http.StatusNotFound {
		t.Fatalf("admin API without --admin-token-file: %d, want 404 (off)", code)
	}
	if code, _ := adminCall(t, "GET", off.admin, pagePath, ""); code != http.StatusNotFound {
		t.Fatalf("operator page without --admin-token-file: %d, want 404 (off)", code)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, up.srv.URL, store, "--admin-token-file", tokenFile)
	spec, _ := parseStoreSpec(store)
	opened, err := openStore(context.Background(), spec, keystore.DefaultMaxResultSize)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.close()
	// This test owns Redis database 10: clear what an earlier run left.
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: 10})
	defer rdb.Close()
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	checkAdminKeys(t, p.admin, opened.Store)
}

// The admin mode's recording wrapper keeps what the store can do for
// waiters: a notifying store still notifies, and one that cannot still
// cannot (keystore.As looks through every layer).
func TestHeldStoreKeepsNotify(t *testing.T) {
	h := newHeldKeys()
	mem := dbtest.MemStore(t)
	if !keystore.CanNotify(h.wrap(mem, "r")) {
		t.Fatal("memstore behind the admin wrapper cannot notify")
	}
	if _, ok := keystore.As[keystore.Peeker](h.wrap(mem, "r")); ok {
		t.Fatal("the admin wrapper claims a Peek that memstore does not have")
	}
}
