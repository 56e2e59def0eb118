package routeconfig

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
)

func ptr[T any](v T) *T { return &v }

func TestCheck(t *testing.T) {
	t.Parallel()
	s, errs := Check(Route{
		TTL: ptr(time.Hour), Lease: ptr(10 * time.Second), Wait: ptr(time.Duration(0)), Methods: []string{" post", "put"},
		KeyFrom: &KeyFrom{CloudEvents: true}, Fingerprint: ptr("json"), Scope: &Scope{Cookie: "sid", Anonymous: true},
		MaxBody: ptr(int64(1 << 10)), MaxResponse: ptr(2 << 10), Store4xx: ptr(false),
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if s.Required == nil || !*s.Required {
		t.Errorf("key-from does not make the key required: %+v", s.Required)
	}
	if strings.Join(s.Methods, ",") != "POST,PUT" || s.TTL != time.Hour || s.Lease != 10*time.Second || s.KeySource == nil || s.BodyFingerprint == nil {
		t.Errorf("settings: %+v", s)
	}
	// key optional stays optional with key-from.
	if s, _ := Check(Route{Key: ptr("optional"), KeyFrom: &KeyFrom{Header: "X-Id"}}); s.Required == nil || *s.Required {
		t.Errorf("key optional with key-from: %+v", s.Required)
	}
	// Every option builds a middleware.
	store := dbtest.MemStore(t)
	if _, err := idemhttp.New(store, s.Options()...); err != nil {
		t.Fatal(err)
	}
	fn := &Scope{Func: func(*http.Request) (string, error) { return "x", nil }, FuncName: "a {placeholder}"}
	if _, err := idemhttp.New(store, Settings{Scope: fn}.Options()...); err != nil {
		t.Fatal(err)
	}
}

func TestCheckErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r           Route
		field, want string
	}{
		{Route{Key: ptr("maybe")}, "key", "want required or optional"},
		{Route{TTL: ptr(time.Duration(0))}, "ttl", "must be positive"},
		{Route{Wait: ptr(-time.Second)}, "wait", "must not be negative"},
		{Route{Methods: []string{}}, "methods", "empty list"},
		{Route{Methods: []string{"a/b"}}, "methods", "is not a method"},
		{Route{FingerprintHeaders: []string{"a:b"}}, "fingerprint-headers", "is not a header name"},
		{Route{Scope: &Scope{Header: "X", Cookie: "c"}}, "scope", "name one of header, cookie or authorization"},
		{Route{Scope: &Scope{Header: "X", Func: func(*http.Request) (string, error) { return "", nil }, FuncName: "a {placeholder}"}}, "scope", "or a {placeholder}"},
		{Route{Scope: &Scope{}}, "scope", "names no principal"},
		{Route{Scope: &Scope{Header: "X", Anonymous: true}}, "scope", "anonymous contradicts header"},
		{Route{Scope: &Scope{Cookie: "a=b"}}, "scope", "is not a cookie name"},
		{Route{KeyFrom: &KeyFrom{}}, "key-from", "name one of"},
		{Route{KeyFrom: &KeyFrom{Header: "X", JSON: "a"}}, "key-from", "name one of"},
		{Route{KeyFrom: &KeyFrom{JSON: "a["}}, "key-from", ""},
		{Route{Fingerprint: ptr("canonical")}, "fingerprint", "want raw, json or fields"},
		{Route{Fingerprint: ptr("raw"), FingerprintFields: []string{"a"}}, "fingerprint-fields", "contradicts fingerprint: raw"},
		{Route{Fingerprint: ptr("fields")}, "fingerprint-fields", ""},
		{Route{MaxBody: ptr(int64(0))}, "max-body", "must be positive"},
		{Route{MaxResponse: ptr(-1)}, "max-response", "must be positive"},
	} {
		_, errs := Check(tc.r)
		if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Problem, tc.want) {
			t.Errorf("Check(%+v) = %v; want one %s error saying %q", tc.r, errs, tc.field, tc.want)
		}
	}
	base := errors.New("invalid config")
	err := Join(base, "f.yaml:3: ", []*FieldError{{"ttl", "x"}})
	if !errors.Is(err, base) || !strings.Contains(err.Error(), "f.yaml:3: ttl: x") {
		t.Errorf("Join: %v", err)
	}
}
