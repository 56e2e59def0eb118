package idemnats

import (
	"maps"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
)

// headers reads a message's NATS headers for idem.Span.Link: the
// producer's trace context (W3C traceparent) travels in them. Header names
// are case-sensitive, as NATS keeps them.
type headers nats.Header

// carrier is the consume core's Config.Headers for JetStream messages.
func carrier(m jetstream.Msg) idem.Carrier { return headers(m.Headers()) }

// Get returns the first value of header name, or "".
func (h headers) Get(name string) string { return nats.Header(h).Get(name) }

// Keys lists the header names.
func (h headers) Keys() []string { return slices.Collect(maps.Keys(h)) }
