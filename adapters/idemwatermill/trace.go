package idemwatermill

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem"
)

// headers reads a message's metadata for idem.Span.Link: the producer's
// trace context (W3C traceparent) travels in it.
type headers message.Metadata

// carrier is the consume core's Config.Headers for Watermill messages.
func carrier(msg *message.Message) idem.Carrier { return headers(msg.Metadata) }

// Get returns metadata field name, or "".
func (h headers) Get(name string) string { return h[name] }

// Keys lists the metadata field names.
func (h headers) Keys() []string {
	ks := make([]string, 0, len(h))
	for k := range h {
		ks = append(ks, k)
	}
	return ks
}
