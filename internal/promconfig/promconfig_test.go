package promconfig_test

import (
	"errors"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/promconfig"
)

type option func(*promconfig.Config) error

type registry struct {
	got  []string
	fail string
}

func (r *registry) Register(c string) error {
	if c == r.fail {
		return errors.New("duplicate")
	}
	r.got = append(r.got, c)
	return nil
}

func TestNew(t *testing.T) {
	reg := &registry{}
	c, err := promconfig.New("p", reg, []float64{1}, []option{
		promconfig.Namespace("edge"),
		promconfig.ConstLabels(map[string]string{"site": "a"}, "op"),
		promconfig.Buckets([]float64{0.1, 2}),
	})
	if err != nil || c.Namespace != "edge" || c.Labels["site"] != "a" || len(c.Buckets) != 2 {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := promconfig.New[option]("p", reg, []float64{1}, nil); err != nil || c.Namespace != "idem" || c.Buckets[0] != 1 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for name, err := range map[string]error{
		"nil option":     func() error { _, err := promconfig.New("p", reg, nil, []option{nil}); return err }(),
		"nil registerer": func() error { _, err := promconfig.New[option]("p", nil, nil, nil); return err }(),
	} {
		if !errors.Is(err, idem.ErrInvalidOption) || err.Error()[:3] != "p: " {
			t.Errorf("%s: %v", name, err)
		}
	}
	var set promconfig.Config
	for name, err := range map[string]error{
		"namespace":     set.SetNamespace("a-b"),
		"label name":    set.SetLabels(map[string]string{"a b": ""}),
		"taken label":   set.SetLabels(map[string]string{"op": ""}, "op"),
		"no buckets":    set.SetBuckets(nil),
		"bucket repeat": set.SetBuckets([]float64{1, 1}),
	} {
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRegister(t *testing.T) {
	c, err := promconfig.New[option]("p", &registry{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := &registry{fail: "b"}
	if err := promconfig.Register(c, reg, "a", "b", "c"); err == nil || err.Error() != "p: duplicate" || len(reg.got) != 1 {
		t.Fatalf("Register: %v, registered %v; want the first failure, prefixed, and nothing after it", err, reg.got)
	}
}
