package idemamqp

import (
	"slices"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Only string headers are trace context: others read as absent, and Keys
// leaves them out.
func TestCarrierStringsOnly(t *testing.T) {
	c := carrier(amqp.Delivery{Headers: amqp.Table{"traceparent": "00-x", "tracestate": []byte("k=v"), "x-n": int32(1), "x-nil": nil}})
	if got := c.Get("traceparent"); got != "00-x" {
		t.Errorf("Get(traceparent) = %q", got)
	}
	for _, k := range []string{"tracestate", "x-n", "x-nil", "absent"} {
		if got := c.Get(k); got != "" {
			t.Errorf("Get(%s) = %q, want \"\"", k, got)
		}
	}
	if ks := c.Keys(); !slices.Equal(ks, []string{"traceparent"}) {
		t.Errorf("Keys = %v, want [traceparent]", ks)
	}
	if ks := carrier(amqp.Delivery{}).Keys(); len(ks) != 0 {
		t.Errorf("no headers: Keys = %v", ks)
	}
}
