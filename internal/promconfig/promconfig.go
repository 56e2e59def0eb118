// Package promconfig is what idem's Prometheus packages (idemhttpprom,
// inboxprom, keystoreprom) share: their options, checked one way, the
// check of their registerer and the registration of their collectors. It
// does not import Prometheus, so that the core module does not require it.
package promconfig

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
)

// Config is what the options set.
type Config struct {
	Namespace string            // first part of every metric's name
	Labels    map[string]string // constant labels of every metric
	Buckets   []float64         // the duration histograms' buckets, in seconds

	pkg string // prefixes every error
}

var metricName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// New applies opts, in order, to the defaults of package pkg's collectors
// (namespace "idem" and buckets), and checks that reg, the registerer its
// New was given, is not nil. A nil option, a failing one or a nil reg is
// an error wrapping idem.ErrInvalidOption, prefixed with pkg.
func New[O ~func(*Config) error](pkg string, reg any, buckets []float64, opts []O) (Config, error) {
	c := Config{Namespace: "idem", Buckets: buckets, pkg: pkg}
	if err := option.Apply(pkg, &c, opts); err != nil {
		return Config{}, err
	}
	if reg == nil {
		return Config{}, fmt.Errorf("%s: nil registerer: %w", pkg, idem.ErrInvalidOption)
	}
	return c, nil
}

// Register registers cs with reg in order and returns the first failure
// (such as the registry's AlreadyRegisteredError), prefixed with the
// package of c.
func Register[C any](c Config, reg interface{ Register(C) error }, cs ...C) error {
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("%s: %w", c.pkg, err)
		}
	}
	return nil
}

// Namespace is each package's WithNamespace: it sets the namespace (see
// [Config.SetNamespace]).
func Namespace(ns string) func(*Config) error {
	return func(c *Config) error { return c.SetNamespace(ns) }
}

// ConstLabels is each package's WithConstLabels: it sets the constant
// labels, none of which may be one of the package's variable labels, taken
// (see [Config.SetLabels]).
func ConstLabels(l map[string]string, taken ...string) func(*Config) error {
	return func(c *Config) error { return c.SetLabels(l, taken...) }
}

// Buckets is each package's WithBuckets: it sets the duration histograms'
// buckets (see [Config.SetBuckets]).
func Buckets(b []float64) func(*Config) error {
	return func(c *Config) error { return c.SetBuckets(b) }
}

// SetNamespace sets the namespace if it is a metric name; the error wraps
// idem.ErrInvalidOption.
func (c *Config) SetNamespace(ns string) error {
	if !metricName.MatchString(ns) {
		return c.invalid("namespace %q is not a metric name", ns)
	}
	c.Namespace = ns
	return nil
}

// SetLabels sets the constant labels if every name is a label name and not
// one of the package's variable labels (taken).
func (c *Config) SetLabels(l map[string]string, taken ...string) error {
	for k := range l {
		if !metricName.MatchString(k) || slices.Contains(taken, k) {
			return c.invalid("label %q is not a free label name", k)
		}
	}
	c.Labels = l
	return nil
}

// SetBuckets sets the buckets if there is at least one and they increase.
func (c *Config) SetBuckets(b []float64) error {
	if len(b) == 0 || !slices.IsSorted(b) || len(slices.Compact(slices.Clone(b))) != len(b) {
		return c.invalid("buckets %v are not increasing", b)
	}
	c.Buckets = b
	return nil
}

func (c *Config) invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", c.pkg, fmt.Sprintf(format, args...), idem.ErrInvalidOption)
}
