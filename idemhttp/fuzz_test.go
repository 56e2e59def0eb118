package idemhttp

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idem-go/idem/keystore"
)

// FuzzParseKey: whatever is accepted is a usable key (1 to 255 printable
// ASCII characters), and the sf-string form of an accepted bare key parses to
// the same key.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, "abc", `""`, `"a\"b"`, "a b", `"é"`, `"x";p=1`, "?1", `"a", "b"`, "k\x00", strings.Repeat("k", 256)} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, v string, strict bool) {
		h := http.Header{}
		h.Set(HeaderKey, v)
		key, err := ParseKey(h, strict)
		if err != nil {
			return
		}
		if key == "" || len(key) > 255 || !utf8.ValidString(key) {
			t.Fatalf("accepted %q as %q", v, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted %q with byte %#x", v, key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		h.Set(HeaderKey, quoted)
		again, err := ParseKey(h, true)
		if err != nil || again != key {
			t.Fatalf("%q → %q, but its sf-string %s → %q, %v", v, key, quoted, again, err)
		}
	})
}

// FuzzFingerprint: deterministic, and any change of body or path changes it.
func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/orders", "a=1&b=2", []byte("pen"))
	f.Add("PATCH", "/", "", []byte{})
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		if method == "" || strings.ContainsAny(method, " \t\r\n") || !strings.HasPrefix(path, "/") || strings.ContainsAny(path+query, " \t\r\n#?") {
			return
		}
		r, err := http.NewRequest(method, "http://x"+path+"?"+query, nil)
		if err != nil {
			return
		}
		a := Fingerprint(r, body, nil)
		if b := Fingerprint(r, body, nil); !bytes.Equal(a, b) {
			t.Fatal("not deterministic")
		}
		if c := Fingerprint(r, append(append([]byte{}, body...), 0), nil); bytes.Equal(a, c) {
			t.Fatal("body change not seen")
		}
		r2 := httptest.NewRequest(method, "http://x"+path+"x?"+query, nil)
		if bytes.Equal(a, Fingerprint(r2, body, nil)) {
			t.Fatal("path change not seen")
		}
	})
}

// FuzzDecodeRecord: no input panics, and what encodes decodes back.
func FuzzDecodeRecord(f *testing.F) {
	f.Add((&record{status: 201, header: http.Header{"Location": {"/a"}}, body: []byte("ok")}).encode())
	f.Add((&record{status: 500, notStored: true, header: http.Header{}}).encode())
	f.Add([]byte("IDH1\x00\x00"))
	f.Add((&record{status: 201, lost: true, header: http.Header{}}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		again, err := decodeRecord(r.encode())
		if err != nil || again.status != r.status || again.notStored != r.notStored || again.lost != r.lost || !bytes.Equal(again.body, r.body) || len(again.header) != len(r.header) {
			t.Fatalf("round trip changed the record: %+v → %+v (%v)", r, again, err)
		}
	})
}

// FuzzReadBody: whatever the body and its declared length, readBody either
// returns the body whole (within the limit) or refuses it, and gives every
// byte it accounted back to the budget.
func FuzzReadBody(f *testing.F) {
	f.Add([]byte("hello"), int64(5), 8)
	f.Add([]byte(""), int64(-1), 1)
	f.Add(bytes.Repeat([]byte("x"), 100), int64(-1), 64)
	f.Add([]byte("short"), int64(100), 16)
	f.Fuzz(func(t *testing.T, body []byte, declared int64, limit int) {
		if limit <= 0 || limit > 1<<16 {
			return
		}
		m, err := New(nopStore{}, WithMaxRequestBody(int64(limit)), WithMaxBufferedBytes(int64(limit)+1+minBodyStep))
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		r.ContentLength = max(declared, -1)
		w := httptest.NewRecorder()
		got, held, o := m.readBody(w, r)
		if o == "" && (len(got) > limit || !bytes.Equal(got, body)) {
			t.Fatalf("accepted %d bytes (limit %d) of a %d-byte body", len(got), limit, len(body))
		}
		if o != "" && len(body) <= limit && declared <= int64(limit) {
			t.Fatalf("refused a %d-byte body under the limit %d: %s", len(body), limit, o)
		}
		m.budget.release(held)
		if n := m.budget.used.Load(); n != 0 {
			t.Fatalf("%d bytes left accounted", n)
		}
	})
}

// nopStore is never called by readBody.
type nopStore struct{ keystore.Store }

func TestDescribeRecord(t *testing.T) {
	for _, r := range []*record{
		{status: 201, header: http.Header{"A": {"b"}}, body: []byte("x")},
		{status: 200, notStored: true},
		{status: 404, lost: true},
	} {
		st, ns, lost, err := DescribeRecord(r.encode())
		if err != nil || st != r.status || ns != r.notStored || lost != r.lost {
			t.Fatalf("DescribeRecord(%+v) = %d %v %v %v", r, st, ns, lost, err)
		}
	}
	if _, _, _, err := DescribeRecord([]byte("not a record")); err == nil {
		t.Fatal("DescribeRecord of garbage: no error")
	}
}
