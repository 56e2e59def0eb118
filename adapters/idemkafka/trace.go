package idemkafka

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
)

// headers reads a record's headers for idem.Span.Link: the producer's
// trace context (W3C traceparent) travels in them. A pointer conversion,
// so that handing it to the core allocates nothing.
type headers kgo.Record

// carrier is the consume core's Config.Headers for records.
func carrier(r *kgo.Record) idem.Carrier { return (*headers)(r) }

// Get returns the value of the first header named name, or "" (as NATS
// and gRPC metadata read a repeated header).
func (h *headers) Get(name string) string {
	for _, rh := range h.Headers {
		if rh.Key == name {
			return string(rh.Value)
		}
	}
	return ""
}

// Keys lists the header names, in record order.
func (h *headers) Keys() []string {
	ks := make([]string, len(h.Headers))
	for i, rh := range h.Headers {
		ks[i] = rh.Key
	}
	return ks
}
