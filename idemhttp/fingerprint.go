package idemhttp

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// Fingerprint returns the SHA-256 digest idem stores beside a key to detect a
// key reused for another request. It covers, in this order, each part
// length-prefixed (8 bytes, big endian) so that no two requests share an
// encoding:
//
//  1. the method, upper case;
//  2. the escaped path (r.URL.EscapedPath());
//  3. the query, with parameters sorted by name and then by value;
//  4. each header of headers, in the order given, as its canonical name and
//     its values joined by ", " (absent and empty are the same);
//  5. the body.
//
// The Idempotency-Key header itself, and every header not in headers, are not
// part of it: a retry that differs only in, say, User-Agent is the same
// request.
func Fingerprint(r *http.Request, body []byte, headers []string) []byte {
	// The parts are laid out in one buffer and hashed at once when they
	// are small, the usual case: one allocation (the digest), none for the
	// hasher. A larger request streams through a hasher; both hash the
	// same bytes.
	var buf [1024]byte
	b := buf[:0]
	part := func(p string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	part(strings.ToUpper(r.Method))
	part(r.URL.EscapedPath())
	part(canonicalQuery(r.URL.RawQuery))
	for _, name := range headers {
		part(http.CanonicalHeaderKey(name))
		part(strings.Join(r.Header.Values(name), ", "))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	if len(b)+len(body) <= len(buf) {
		sum := sha256.Sum256(append(b, body...))
		return sum[:]
	}
	h := sha256.New()
	h.Write(b)
	h.Write(body)
	return h.Sum(nil)
}

// canonicalQuery sorts the query's parameters by name, then value. A query
// that does not parse is used as it is.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "\x00raw:" + raw
	}
	for _, v := range q {
		sort.Strings(v)
	}
	return q.Encode() // sorts by key
}
