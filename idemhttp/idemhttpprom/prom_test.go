package idemhttpprom_test

import (
	"fmt"
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
	if n := testutil.CollectAndCount(reg, "idem_http_requests_total"); n != 2 {
		t.Fatalf("%d series", n)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "idem_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == "replayed" && m.GetCounter().GetValue() != 2 {
				t.Fatalf("replayed = %v", m.GetCounter().GetValue())
			}
		}
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
