package idemhttp_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idem-go/idem/idemhttp"
)

// TestRecordRoomFollowsBodies: the room a record leaves for a body of
// unknown length follows the bodies stored (so that a small response does
// not carry a large buffer), and a body larger than the room, of unknown
// or of declared length, is still stored and replayed whole.
func TestRecordRoomFollowsBodies(t *testing.T) {
	m := memMiddleware(t)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		body := bytes.Repeat([]byte("x"), n)
		if r.URL.Query().Get("cl") != "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.WriteHeader(http.StatusCreated)
		for len(body) > 0 { // in pieces, as a handler that streams JSON does
			k := min(len(body), 700)
			_, _ = w.Write(body[:k])
			body = body[k:]
		}
	}))
	call := func(key, query string) *httptest.ResponseRecorder {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/orders?"+query, strings.NewReader("{}"))
		r.Header.Set(idemhttp.HeaderKey, key)
		r.Header.Set("Authorization", "Bearer room-test")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if got := idemhttp.RecordRoom(m); got != 512 {
		t.Fatalf("room before any body: %d, want 512", got)
	}
	for i := range 40 {
		if w := call("small-"+strconv.Itoa(i), "n=30"); w.Code != http.StatusCreated || w.Body.Len() != 30 {
			t.Fatalf("small %d: %d, %d bytes", i, w.Code, w.Body.Len())
		}
	}
	if got := idemhttp.RecordRoom(m); got > 128 {
		t.Fatalf("room after 40 bodies of 30 bytes: %d, want at most 128", got)
	}
	for _, c := range []struct{ key, query string }{
		{"large", "n=5000"},
		{"large-declared", "n=5000&cl=1"},
		{"empty", "n=0"},
		{"small-again", "n=30"},
	} {
		first := call(c.key, c.query)
		replay := call(c.key, c.query)
		if replay.Header().Get(idemhttp.HeaderReplayed) != "true" {
			t.Fatalf("%s: second call not replayed (%d)", c.key, replay.Code)
		}
		if replay.Code != first.Code || !bytes.Equal(replay.Body.Bytes(), first.Body.Bytes()) {
			t.Fatalf("%s: replayed %d with %d bytes, first answer %d with %d bytes", c.key, replay.Code, replay.Body.Len(), first.Code, first.Body.Len())
		}
	}
}
