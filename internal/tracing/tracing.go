// Package tracing starts spans through an optional [idem.Tracer]: with a nil
// Tracer, Start returns the context unchanged and a Span that does nothing,
// so callers never check.
package tracing

import (
	"context"

	"github.com/idem-go/idem"
)

// Start begins a span named op through t, or a no-op span when t is nil.
func Start(ctx context.Context, t idem.Tracer, op string) (context.Context, idem.Span) {
	if t == nil {
		return ctx, Nop
	}
	return t.Start(ctx, op)
}

// Nop is a Span that records nothing.
var Nop idem.Span = nop{}

type nop struct{}

func (nop) Key(string)        {}
func (nop) Attr(string, any)  {}
func (nop) Link(idem.Carrier) {}
func (nop) End(string, error) {}

// Headers is a [idem.Carrier] over a map of single-valued headers.
type Headers map[string]string

// Get returns the value of header name.
func (h Headers) Get(name string) string { return h[name] }

// Keys lists the header names.
func (h Headers) Keys() []string {
	ks := make([]string, 0, len(h))
	for k := range h {
		ks = append(ks, k)
	}
	return ks
}
