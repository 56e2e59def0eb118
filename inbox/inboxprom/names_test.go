package inboxprom_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem/idemhttp/idemhttpprom"
	"github.com/idem-go/idem/inbox/inboxprom"
	"github.com/idem-go/idem/keystore/keystoreprom"
	"github.com/idem-go/idem/keystore/storetest"
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
	m, err := keystoreprom.New(storetest.NewRefStore())
	if err != nil {
		t.Fatal(err)
	}
	rec.cs = append(rec.cs, m)
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
