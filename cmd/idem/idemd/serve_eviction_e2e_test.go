package main

import (
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
)

// Issue 31 item 5: idem serve on a Redis whose maxmemory-policy may evict
// idem's keys says so at start-up, naming the policy and the fix; on one
// that does not evict, it says nothing.
func TestServeWarnsOfEviction(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	evicting := testenv.StartRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	p := startServe(t, up.srv.URL, "redis://"+evicting.Addr+"/0")
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "THE STORE MAY EVICT KEYS") })
	if log := p.out.String(); !strings.Contains(log, "allkeys-lru") || !strings.Contains(log, "noeviction") {
		t.Fatalf("the warning does not name the policy and the fix:\n%s", log)
	}
	safe := testenv.StartRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	q := startServe(t, up.srv.URL, "redis://"+safe.Addr+"/0")
	if r := post(t, q.url, "/v1/charges", "ev-1", "x"); r.status != 201 {
		t.Fatalf("a request through the safe store: %d", r.status)
	}
	if strings.Contains(q.out.String(), "EVICT") {
		t.Fatalf("warned of eviction on a noeviction Redis:\n%s", q.out.String())
	}
}
