package idem

import "context"

// Tracer starts a span around one of idem's operations: an inbox
// transaction, a key store call, a keyed HTTP request, a consumed broker
// message. The packages that do those operations accept a Tracer
// (inbox.WithTracer, idemhttp.WithTracer, each adapter's WithTracer) and
// depend on no tracing library; package github.com/idem-go/idem/idemotel,
// a module of its own, implements Tracer with OpenTelemetry. A nil Tracer
// traces nothing.
//
// Implementations must be safe for concurrent use, and cheap: Start is
// called once per operation, on the hot path.
type Tracer interface {
	// Start begins a span named op (one of the Op constants) as a child of
	// the span in ctx, if any, and returns a context carrying the new span:
	// work done with that context (the handler's SQL, the effect) nests
	// under it.
	Start(ctx context.Context, op string) (context.Context, Span)
}

// Span is one traced operation in progress. Its methods are called by one
// goroutine, End last and once.
type Span interface {
	// Key records the operation's idempotency key as a one-way hash
	// ([AttrKeyHash]), never the key itself: keys may carry user data.
	Key(key string)
	// Attr records an attribute: value is a string, bool, int or int64.
	Attr(name string, value any)
	// Link links the span to the trace context carried by a broker record's
	// or a request's headers (the producer's span), read through c. Headers
	// without a trace context add no link.
	Link(c Carrier)
	// End ends the span. outcome names what happened (an Outcome's name,
	// "reserved", "replayed", "lease_lost", …); a non-nil err marks the span
	// failed.
	End(outcome string, err error)
}

// Injector is implemented by a Tracer that can write the trace context of
// a context (its current span) into outgoing headers, as
// package idemotel's does with its propagator. idemhttp's Proxy uses it on
// the upstream call of a keyed request, so that the upstream's spans are
// children of the request's span.
type Injector interface {
	// Inject writes ctx's trace context through set (a header name and
	// its value; traceparent and tracestate for W3C Trace Context).
	Inject(ctx context.Context, set func(name, value string))
}

// Carrier reads the headers of a broker record or a request, for
// [Span.Link]. Header names are as the transport gives them.
type Carrier interface {
	// Get returns the value of header name, or "".
	Get(name string) string
	// Keys lists the header names.
	Keys() []string
}

// The operations idem traces, as span names.
const (
	OpInboxProcess         = "idem.inbox.process"
	OpInboxProcessBatch    = "idem.inbox.process_batch"
	OpInboxProcessBatchSet = "idem.inbox.process_batch_set"
	OpKeystoreReserve      = "idem.keystore.reserve"
	OpKeystoreComplete     = "idem.keystore.complete"
	OpKeystoreRelease      = "idem.keystore.release"
	OpKeystoreExtend       = "idem.keystore.extend"
	OpHTTPRequest          = "idem.http.request"
	OpGRPCCall             = "idem.grpc.call"     // one keyed unary call (idemgrpc)
	OpConsume              = "idem.consume"       // one broker message, from delivery to acknowledgement
	OpConsumeBatch         = "idem.consume.batch" // one fetched batch of messages
)

// The attributes idem records on its spans.
const (
	AttrKeyHash   = "idem.key_hash"    // hex of the first 8 bytes of SHA-256(key)
	AttrOutcome   = "idem.outcome"     // what happened, as End's outcome
	AttrConsumer  = "idem.consumer"    // the inbox consumer name
	AttrScope     = "idem.scope"       // the key store scope
	AttrBatchSize = "idem.batch.size"  // messages in a batch
	AttrApplied   = "idem.applied"     // messages of a batch whose effect committed
	AttrDuplicate = "idem.duplicates"  // messages of a batch already recorded
	AttrAttempt   = "idem.attempt"     // the delivery attempt, from 1
	AttrSystem    = "messaging.system" // the broker: kafka, nats, rabbitmq, watermill
	AttrRoute     = "idem.route"       // the HTTP route pattern
	AttrTakeover  = "idem.takeover"    // true on a Reserve that replaced an expired lease
	AttrTxAttempt = "idem.tx.attempts" // transactions an inbox call ran, from 1 (more: retried after a serialization failure, deadlock or busy database)
	AttrFailed    = "idem.failed"      // messages of a batch that failed alone (handler error, mismatch, invalid key or fingerprint)
)
