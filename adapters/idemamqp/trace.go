package idemamqp

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idem-go/idem"
)

// headers reads a delivery's AMQP headers for idem.Span.Link: the
// producer's trace context (W3C traceparent) travels in them. AMQP header
// values may be of any table type; only strings are trace context, so the
// others read as absent.
type headers amqp.Table

// carrier is the consume core's Config.Headers for deliveries.
func carrier(d amqp.Delivery) idem.Carrier { return headers(d.Headers) }

// Get returns header name's value if it is a string, else "".
func (h headers) Get(name string) string {
	s, _ := h[name].(string)
	return s
}

// Keys lists the names of the string-valued headers.
func (h headers) Keys() []string {
	ks := make([]string, 0, len(h))
	for k, v := range h {
		if _, ok := v.(string); ok {
			ks = append(ks, k)
		}
	}
	return ks
}
