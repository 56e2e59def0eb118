package inboxprom_test

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp/idemhttpprom"
	"github.com/idem-go/idem/inbox/inboxprom"
	"github.com/idem-go/idem/keystore/keystoreprom"
)

// recorder is a Registerer that keeps what is registered.
type recorder struct{ cs []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error   { r.cs = append(r.cs, c); return nil }
func (r *recorder) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recorder) Unregister(prometheus.Collector) bool    { return false }

var (
	fqName = regexp.MustCompile(`fqName: "([^"]+)"`)
	scheme = regexp.MustCompile(`^idem_(keystore|http|inbox)_[a-z_]+_(total|seconds|size)$`)
)

// Every metric of the inbox, keystore and HTTP collectors follows one
// naming scheme and is listed in docs/operations.md.
func TestMetricNames(t *testing.T) {
	rec := &recorder{}
	if _, err := inboxprom.New(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := idemhttpprom.New(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := keystoreprom.New(rec); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range rec.cs {
		c.Describe(ch)
	}
	close(ch)
	n := 0
	for d := range ch {
		match := fqName.FindStringSubmatch(d.String())
		if match == nil {
			t.Fatalf("no name in %v", d)
		}
		name := match[1]
		n++
		if !scheme.MatchString(name) {
			t.Errorf("%s breaks the naming scheme idem_<component>_<what>_{total,seconds,size}", name)
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is not listed in docs/operations.md", name)
		}
	}
	if n < 12 {
		t.Fatalf("only %d metrics described", n)
	}
}

// newAll builds the collectors of the three Prometheus packages into rec,
// each with the same namespace, labels and buckets (nil: the default).
func newAll(rec prometheus.Registerer, ns string, labels prometheus.Labels, buckets []float64) map[string]error {
	var (
		in []inboxprom.Option
		ht []idemhttpprom.Option
		ks []keystoreprom.Option
	)
	if ns != "" {
		in, ht, ks = append(in, inboxprom.WithNamespace(ns)), append(ht, idemhttpprom.WithNamespace(ns)), append(ks, keystoreprom.WithNamespace(ns))
	}
	if labels != nil {
		in, ht, ks = append(in, inboxprom.WithConstLabels(labels)), append(ht, idemhttpprom.WithConstLabels(labels)), append(ks, keystoreprom.WithConstLabels(labels))
	}
	if buckets != nil {
		in, ht, ks = append(in, inboxprom.WithBuckets(buckets)), append(ht, idemhttpprom.WithBuckets(buckets)), append(ks, keystoreprom.WithBuckets(buckets))
	}
	_, inErr := inboxprom.New(rec, in...)
	_, htErr := idemhttpprom.New(rec, ht...)
	_, ksErr := keystoreprom.New(rec, ks...)
	return map[string]error{"inboxprom": inErr, "idemhttpprom": htErr, "keystoreprom": ksErr}
}

// The three packages take the same options with the same rules: applied to
// every metric, a bad value refused by New with idem.ErrInvalidOption.
func TestOptions(t *testing.T) {
	rec := &recorder{}
	for pkg, err := range newAll(rec, "edge", prometheus.Labels{"site": "a"}, []float64{0.01, 1}) {
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
	}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range rec.cs {
		c.Describe(ch)
	}
	close(ch)
	for d := range ch {
		if s := d.String(); !strings.Contains(s, `fqName: "edge_`) || !strings.Contains(s, `site="a"`) {
			t.Errorf("namespace or label not applied: %s", s)
		}
	}
	for _, c := range []struct {
		name    string
		ns      string
		labels  prometheus.Labels
		buckets []float64
	}{
		{name: "dash in namespace", ns: "a-b"},
		{name: "digit first in namespace", ns: "1a"},
		{name: "bad label", labels: prometheus.Labels{"a b": "x"}},
		{name: "a variable label", labels: prometheus.Labels{"outcome": "x"}},
		{name: "no buckets", buckets: []float64{}},
		{name: "buckets unsorted", buckets: []float64{1, 0.5}},
		{name: "buckets repeated", buckets: []float64{1, 1}},
	} {
		for pkg, err := range newAll(&recorder{}, c.ns, c.labels, c.buckets) {
			if !errors.Is(err, idem.ErrInvalidOption) {
				t.Errorf("%s, %s: %v, want ErrInvalidOption", pkg, c.name, err)
			}
		}
	}
	if _, err := idemhttpprom.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("idemhttpprom.New(nil): %v", err)
	}
	if _, err := keystoreprom.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("keystoreprom.New(nil): %v", err)
	}
}
