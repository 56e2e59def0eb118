// Package promconfig is the one set of options of idem's Prometheus
// packages (idemhttpprom, inboxprom, keystoreprom), checked one way. It
// does not import Prometheus, so that the core module does not require it.
package promconfig

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/idem-go/idem"
)

// Config is what the options set.
type Config struct {
	Namespace string            // first part of every metric's name
	Labels    map[string]string // constant labels of every metric
	Buckets   []float64         // the duration histograms' buckets, in seconds
}

var metricName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// New applies opts, in order, to the defaults: namespace "idem" and
// buckets. It returns the first option's error.
func New[O ~func(*Config) error](buckets []float64, opts []O) (Config, error) {
	c := Config{Namespace: "idem", Buckets: buckets}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// SetNamespace sets the namespace if it is a metric name; pkg prefixes the
// error, which wraps idem.ErrInvalidOption.
func (c *Config) SetNamespace(pkg, ns string) error {
	if !metricName.MatchString(ns) {
		return fmt.Errorf("%s: namespace %q is not a metric name: %w", pkg, ns, idem.ErrInvalidOption)
	}
	c.Namespace = ns
	return nil
}

// SetLabels sets the constant labels if every name is a label name and not
// one of the package's variable labels (taken).
func (c *Config) SetLabels(pkg string, l map[string]string, taken ...string) error {
	for k := range l {
		if !metricName.MatchString(k) || slices.Contains(taken, k) {
			return fmt.Errorf("%s: label %q is not a free label name: %w", pkg, k, idem.ErrInvalidOption)
		}
	}
	c.Labels = l
	return nil
}

// SetBuckets sets the buckets if there is at least one and they increase.
func (c *Config) SetBuckets(pkg string, b []float64) error {
	if len(b) == 0 || !slices.IsSorted(b) || len(slices.Compact(slices.Clone(b))) != len(b) {
		return fmt.Errorf("%s: buckets %v are not increasing: %w", pkg, b, idem.ErrInvalidOption)
	}
	c.Buckets = b
	return nil
}
