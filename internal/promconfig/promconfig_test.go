package promconfig_test

import (
	"errors"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/promconfig"
)

type option func(*promconfig.Config) error

func TestNew(t *testing.T) {
	c, err := promconfig.New([]float64{1}, []option{
		func(c *promconfig.Config) error { return c.SetNamespace("p", "edge") },
		func(c *promconfig.Config) error { return c.SetLabels("p", map[string]string{"site": "a"}, "op") },
		func(c *promconfig.Config) error { return c.SetBuckets("p", []float64{0.1, 2}) },
	})
	if err != nil || c.Namespace != "edge" || c.Labels["site"] != "a" || len(c.Buckets) != 2 {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := promconfig.New[option]([]float64{1}, nil); err != nil || c.Namespace != "idem" || c.Buckets[0] != 1 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	var set promconfig.Config
	for name, err := range map[string]error{
		"namespace":     set.SetNamespace("p", "a-b"),
		"label name":    set.SetLabels("p", map[string]string{"a b": ""}),
		"taken label":   set.SetLabels("p", map[string]string{"op": ""}, "op"),
		"no buckets":    set.SetBuckets("p", nil),
		"bucket repeat": set.SetBuckets("p", []float64{1, 1}),
	} {
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
