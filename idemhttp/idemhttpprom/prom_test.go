package idemhttpprom_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemhttp/idemhttpprom"
)

func TestHooks(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := idemhttpprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h.Request(idemhttp.OutcomeReplayed, time.Millisecond)
	h.Request(idemhttp.OutcomeReplayed, time.Millisecond)
	h.Request(idemhttp.OutcomeExecuted, time.Second)
	want := `
# HELP idem_http_requests_total Requests seen by the idempotency middleware, by outcome.
# TYPE idem_http_requests_total counter
idem_http_requests_total{outcome="executed"} 1
idem_http_requests_total{outcome="replayed"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idem_http_requests_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "idem_http_request_duration_seconds"); n != 2 {
		t.Fatalf("%d duration series, want 2", n)
	}
	if _, err := idemhttpprom.New(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
}

// Hooks for a proxy, with a label that names it in a shared registry.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	h, err := idemhttpprom.New(reg, idemhttpprom.WithConstLabels(prometheus.Labels{"proxy": "payments"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Pass h to idemhttp.New or idemhttp.NewProxy with idemhttp.WithHooks(h).
	h.Request(idemhttp.OutcomeReplayed, time.Millisecond)
	n, err := testutil.GatherAndCount(reg, "idem_http_requests_total")
	fmt.Println(n, err)
	// Output: 1 <nil>
}
