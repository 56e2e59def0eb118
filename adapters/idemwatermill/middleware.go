package idemwatermill

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/internal/tracing"
	"github.com/idem-go/idem/keystore"
)

// KeyFunc derives a message's dedup key. An error (wrap
// [idem.ErrMissingKey]) means the message has none.
type KeyFunc func(msg *message.Message) (string, error)

// Event reports one handled message to [WithObserver].
type Event = idem.DeliveryEvent[*message.Message]

// Option configures a Middleware or an InboxMiddleware. Options are validated
// once, by the constructor, whose error wraps idem.ErrInvalidOption.
type Option func(*config) error

type config struct {
	consume.Config[*message.Message]
	doOpts []keystore.Option
}

// newConfig checks a constructor's required argument (present, else the
// error names what is missing) and applies its options.
func newConfig(present bool, missing string, opts []Option) (config, error) {
	c := config{Config: consume.Defaults[*message.Message]("idemwatermill", uuidKey)}
	c.System, c.Headers = "watermill", metadata
	if !present {
		return c, c.Invalid("nil %s", missing)
	}
	err := consume.Apply("idemwatermill", &c, opts)
	return c, err
}

// shared adapts one of the options every adapter shares.
func shared(o consume.Option[*message.Message]) Option {
	return func(c *config) error { return o(&c.Config) }
}

// WithKeyMetadata keys messages by the metadata field name instead of
// msg.UUID (the default). A message without the field, or with an empty one,
// fails with an error wrapping idem.ErrMissingKey, marked idem.Permanent.
func WithKeyMetadata(name string) Option {
	key := func(msg *message.Message) (string, error) {
		v := msg.Metadata.Get(name)
		if strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("idemwatermill: no %q metadata: %w", name, idem.ErrMissingKey)
		}
		return v, nil
	}
	return consume.Check("idemwatermill", name != "", func(c *config) { c.Key = key }, "empty metadata field name")
}

// WithKey derives keys with fn (for example idem.DeriveKey over business
// fields of the payload).
func WithKey(fn KeyFunc) Option { return shared(consume.WithKey[*message.Message](fn)) }

// WithFingerprint stores fn(msg), a digest of the payload of at most
// [idem.MaxFingerprintLen] bytes, with each key; the same key with another
// fingerprint fails with idem.ErrFingerprintMismatch, marked
// idem.Permanent.
func WithFingerprint(fn func(msg *message.Message) []byte) Option {
	return shared(consume.WithFingerprint(fn))
}

// WithObserver calls fn once for every message the middleware handled,
// after the handler and the key's commit or completion, with its outcome:
// Applied, Duplicate, Retried (an error: the router nacks it) or
// DeadLettered (an error marked idem.Permanent, with its [idem.Reason]).
// fn must not block.
func WithObserver(fn func(Event)) Option { return shared(consume.WithObserver(fn)) }

// WithLogger logs failed and unusable messages to l (default: discarded).
func WithLogger(l *slog.Logger) Option { return shared(consume.WithLogger[*message.Message](l)) }

// WithTracer traces each handled message through t (idemotel.NewTracer for
// OpenTelemetry): a span (idem.OpConsume) child of the span in
// msg.Context(), linked to the trace context in the message's metadata,
// ended with its outcome. The inbox transaction or the key store calls, and
// the handler (through msg.Context()), run under it.
func WithTracer(t idem.Tracer) Option { return shared(consume.WithTracer[*message.Message](t)) }

// WithKeystoreOptions passes options (lease, TTL, waiting for an
// in-progress holder) to keystore.Do. Middleware only.
func WithKeystoreOptions(opts ...keystore.Option) Option {
	return func(c *config) error {
		if slices.ContainsFunc(opts, func(o keystore.Option) bool { return o == nil }) {
			return c.Invalid("nil keystore option")
		}
		c.doOpts = append(c.doOpts, opts...)
		return nil
	}
}

// metadata reads a message's metadata for idem.Span.Link: the producer's
// trace context (W3C traceparent) travels in it.
func metadata(msg *message.Message) idem.Carrier { return tracing.Headers(msg.Metadata) }

func uuidKey(msg *message.Message) (string, error) {
	if msg.UUID == "" {
		return "", fmt.Errorf("idemwatermill: empty UUID: %w", idem.ErrMissingKey)
	}
	return msg.UUID, nil
}

// handle runs one message through the shared rules: key and fingerprint
// first, then run (the inbox or the key store; applied reports a first
// run), then the decision. A message that can never succeed (no usable key,
// a fingerprint mismatch, an error marked idem.Permanent) fails with an
// error marked idem.Permanent and naming its reason, for a poison queue; any
// other failure is returned as it is, and the router nacks it.
func (c *config) handle(msg *message.Message, run func(ctx context.Context, d *consume.Delivery[*message.Message]) (applied bool, err error)) error {
	d := consume.Delivery[*message.Message]{Msg: msg, Attempt: 1}
	ctx := c.Start(msg.Context(), &d)
	dec, ok := c.Prepare(&d)
	if ok {
		applied, err := run(ctx, &d)
		dec = c.Decide(&d, applied, err)
	}
	c.Report(&d, dec)
	if dec.Outcome != idem.DeadLettered && dec.Outcome != idem.Retried {
		return nil
	}
	return failed(d.Key, &dec)
}

// failed is handle's error for a delivery the router must not acknowledge.
// (A function of its own: the router starts a goroutine a message, and
// each byte of handle's frame is one that goroutine's stack must hold.)
func failed(key string, dec *consume.Decision) error {
	if dec.Outcome == idem.DeadLettered {
		return idem.Permanent(fmt.Errorf("idemwatermill: %s (%s): %w", key, dec.Reason, dec.Err))
	}
	return fmt.Errorf("idemwatermill: %s: %w", key, dec.Err)
}

// Middleware deduplicates a Watermill handler with a keystore.Store: the key
// is reserved in progress before the handler runs, completed only after it
// succeeded, and released when it fails, so that the redelivery of a failed
// message runs the handler again. (Watermill's own middleware.Deduplicator
// records the key before the handler and keeps it on failure: the redelivery
// is then acknowledged as a duplicate and the message is lost.)
type Middleware struct {
	s   keystore.Store
	cfg config
}

// NewMiddleware returns a Middleware over s. Scope s (keystore.Scope) by
// handler or consumer: a key is one operation of one handler.
func NewMiddleware(s keystore.Store, opts ...Option) (*Middleware, error) {
	cfg, err := newConfig(s != nil, "store", opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{s: s, cfg: cfg}, nil
}

// Middleware is the message.HandlerMiddleware: router.AddMiddleware(m.Middleware).
//
// Outcomes: a new key runs h, with msg.Context() set to keystore.Do's
// effect context (cancelled if the key's lease is lost; restored when h
// returns); its produced messages are stored as the key's result and
// returned. A completed key does not run h and returns the stored
// produced messages again (so a crash between completion and publishing loses
// nothing; the publish may repeat, with the same UUIDs). A key in progress
// elsewhere returns an error wrapping keystore.ErrInProgress (the message is
// nacked and redelivered), unless WithKeystoreOptions(keystore.WithWait(...)) is
// given. A store that cannot answer returns its error: fail closed, nack.
//
// What happens if the process dies: before the handler's effect, the lease
// expires and the redelivery runs h; after the effect and before completion,
// the redelivery runs h again once the lease expires (pass the key downstream
// so that the repeat is absorbed there); after completion, the redelivery is
// acknowledged as a duplicate.
func (m *Middleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		var out []*message.Message
		orig := msg.Context()
		defer msg.SetContext(orig)
		err := m.cfg.handle(msg, func(ctx context.Context, d *consume.Delivery[*message.Message]) (bool, error) {
			effect := func(ctx context.Context) ([]byte, error) {
				msg.SetContext(ctx)
				produced, err := h(msg)
				if err != nil {
					return nil, err
				}
				out = produced
				return encode(produced)
			}
			res, replayed, err := keystore.Do(ctx, m.s, d.Key, d.Fingerprint, effect, m.cfg.doOpts...)
			if err == nil && replayed {
				out, err = decode(res)
			}
			return !replayed, err
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
}

type storedMessage struct {
	UUID     string            `json:"u"`
	Metadata map[string]string `json:"m,omitempty"`
	Payload  []byte            `json:"p,omitempty"`
}

func encode(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	out := make([]storedMessage, len(msgs))
	for i, m := range msgs {
		out[i] = storedMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("idemwatermill: encode produced messages: %w", err)
	}
	return b, nil
}

func decode(b []byte) ([]*message.Message, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var in []storedMessage
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("idemwatermill: decode stored messages: %w", err)
	}
	out := make([]*message.Message, len(in))
	for i, s := range in {
		m := message.NewMessage(s.UUID, s.Payload)
		for k, v := range s.Metadata {
			m.Metadata.Set(k, v)
		}
		out[i] = m
	}
	return out, nil
}
