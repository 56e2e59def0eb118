package main

import (
	"strconv"
	"strings"
	"testing"
)

// Issue 31 at the process level: a route's quota: in the --config file.
// One principal past its quota gets 429 with Retry-After and the upstream
// is not called; another principal still gets through; the first one can
// still collect the answers it holds.
func TestServeConfigQuota(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p, _ := startWithConfig(t, up, "routes:\n  - pattern: POST /q\n    quota:\n      principal-keys: 2\n      principal-bytes: 1MiB\n      keys: 100\n      bytes: 64MiB\n")
	alice := []string{"Authorization", "Bearer alice"}
	for _, k := range []string{"a1", "a2"} {
		if r := post(t, p.url, "/q", k, "x", alice...); r.status != 201 {
			t.Fatalf("alice %s: %d %s", k, r.status, r.body)
		}
	}
	r := post(t, p.url, "/q", "a3", "x", alice...)
	if r.status != 429 || !strings.Contains(r.body, "quota") {
		t.Fatalf("alice past her quota: %d %s, want 429 quota-exceeded", r.status, r.body)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s <= 0 {
		t.Errorf("Retry-After %q, want a positive number of seconds", r.header.Get("Retry-After"))
	}
	if n := up.count("/q"); n != 2 {
		t.Errorf("upstream called %d times, want 2 (the refused request must not reach it)", n)
	}
	if r := post(t, p.url, "/q", "a1", "x", alice...); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("alice's replay at her quota: %d %v, want the stored 201", r.status, r.header)
	}
	if r := post(t, p.url, "/q", "b1", "x", "Authorization", "Bearer bob"); r.status != 201 {
		t.Errorf("bob beside alice's full quota: %d %s, want 201", r.status, r.body)
	}
	if n := up.count("/q"); n != 3 {
		t.Errorf("upstream called %d times, want 3", n)
	}
}

// A bad quota: value is refused at start, naming the field and the fix.
func TestServeConfigQuotaErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ quota, want string }{
		{"principal-keys: -1", "quota.principal-keys: -1 must not be negative"},
		{"keys: 10\n      bytes: 10XB", `quota.bytes: "10XB": unknown unit "XB"`},
		{"bytes: 1GiB", "quota: set principal-keys or keys"},
		{"pages: 3", "pages"},
	} {
		_, err := parseConfig("idem.yaml", []byte("routes:\n  - pattern: POST /q\n    quota:\n      "+tc.quota+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("quota %q: %v, want an error saying %q", tc.quota, err, tc.want)
		}
	}
}
