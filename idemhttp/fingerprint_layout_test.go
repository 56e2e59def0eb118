package idemhttp_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-go/idem/idemhttp"
)

// The fingerprint is the documented layout, whether the request is small
// (hashed from one buffer) or large (streamed through a hasher): stored
// fingerprints stay valid across the two paths and across releases.
func TestFingerprintLayout(t *testing.T) {
	ref := func(parts ...string) []byte {
		h := sha256.New()
		for _, p := range parts {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(p)))
			h.Write(n[:])
			h.Write([]byte(p))
		}
		return h.Sum(nil)
	}
	for _, body := range []string{"", `{"a":1}`, strings.Repeat("x", 1000), strings.Repeat("y", 5000)} {
		r := httptest.NewRequest("post", "/orders/a%2Fb?b=2&a=1", nil)
		r.Header.Add("X-Tenant", "t1")
		r.Header.Add("X-Tenant", "t2")
		got := idemhttp.Fingerprint(r, []byte(body), []string{"x-tenant"})
		want := ref("POST", "/orders/a%2Fb", "a=1&b=2", "X-Tenant", "t1, t2", body)
		if !bytes.Equal(got, want) {
			t.Fatalf("body of %d bytes: %x, want %x", len(body), got, want)
		}
	}
}
