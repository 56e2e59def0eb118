package idemhttpprom_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemhttp/idemhttpprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
