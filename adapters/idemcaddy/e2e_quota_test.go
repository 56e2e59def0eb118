package idemcaddy_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// quotaGateway is a Caddyfile whose /q/* route bounds each principal to
// two keys with the quota subdirective.
const quotaGateway = caddySite + `	handle /healthz {
		respond "ok"
	}
	handle /q/* {
		idempotency {
			store memory
			quota principal_keys 2 principal_bytes 1MiB keys 100 bytes 64MiB
		}
		reverse_proxy {{UP}}
	}
}
`

// TestCaddyQuota: through a real Caddy process, a principal past its
// quota gets 429 with Retry-After and the upstream is not called; another
// principal still gets through, and the first can still collect the
// answers it holds.
func TestCaddyQuota(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startCaddy(t, quotaGateway, map[string]string{"UP": up.addr()})
	for _, k := range []string{"qa-1", "qa-2"} {
		if r := p.post(t, "/q/orders", k, "Bearer alice", `{}`); r.status != http.StatusCreated {
			t.Fatalf("alice %s: %+v", k, r)
		}
	}
	r := p.post(t, "/q/orders", "qa-3", "Bearer alice", `{}`)
	if r.status != http.StatusTooManyRequests || !strings.Contains(r.body, "quota") {
		t.Fatalf("alice past her quota: %+v, want 429 quota-exceeded", r)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s <= 0 {
		t.Errorf("Retry-After %q, want a positive number of seconds", r.header.Get("Retry-After"))
	}
	if n := up.count("qa-3"); n != 0 {
		t.Errorf("upstream called %d times for the refused key, want 0", n)
	}
	if r := p.post(t, "/q/orders", "qa-1", "Bearer alice", `{}`); r.status != http.StatusCreated || !r.replayed {
		t.Errorf("alice's replay at her quota: %+v, want the stored 201", r)
	}
	if r := p.post(t, "/q/orders", "qb-1", "Bearer bob", `{}`); r.status != http.StatusCreated || up.count("qb-1") != 1 {
		t.Errorf("bob beside alice's full quota: %+v (upstream %d), want 201 from the upstream", r, up.count("qb-1"))
	}
}
