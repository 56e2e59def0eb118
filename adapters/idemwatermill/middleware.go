package idemwatermill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// KeyFunc derives a message's dedup key.
type KeyFunc func(msg *message.Message) (string, error)

// ErrMissingKey is wrapped when a message's key cannot be derived. The
// message is not handled and is nacked, unless the error is also marked
// permanent (see WithKeyFunc).
var ErrMissingKey = errors.New("idemwatermill: message has no key")

// Option configures a Middleware or an InboxMiddleware. Options are validated
// once, by the constructor, whose error wraps idem.ErrInvalidOption.
type Option func(*config) error

type config struct {
	key         KeyFunc
	fingerprint func(*message.Message) []byte
	doOpts      []keystore.Option
}

func defaultConfig() config {
	return config{key: uuidKey}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("idemwatermill: %s: %w", fmt.Sprintf(format, args...), idem.ErrInvalidOption)
}

func applyOptions(opts []Option) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return c, invalid("nil option")
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithKeyMetadata keys messages by the metadata field name instead of
// msg.UUID (the default). A message without the field, or with an empty one,
// fails with ErrMissingKey, marked idem.Permanent.
func WithKeyMetadata(name string) Option {
	return func(c *config) error {
		if name == "" {
			return invalid("empty metadata field name")
		}
		c.key = func(msg *message.Message) (string, error) {
			v := msg.Metadata.Get(name)
			if strings.TrimSpace(v) == "" {
				return "", idem.Permanent(fmt.Errorf("%w: no %q metadata", ErrMissingKey, name))
			}
			return v, nil
		}
		return nil
	}
}

// WithKeyFunc derives keys with fn (for example idem.DeriveKey over business
// fields of the payload).
func WithKeyFunc(fn KeyFunc) Option {
	return func(c *config) error {
		if fn == nil {
			return invalid("nil key func")
		}
		c.key = fn
		return nil
	}
}

// WithFingerprint stores fn(msg), a digest of the payload, with each key; the
// same key with another fingerprint fails with idem.ErrFingerprintMismatch.
func WithFingerprint(fn func(msg *message.Message) []byte) Option {
	return func(c *config) error {
		if fn == nil {
			return invalid("nil fingerprint func")
		}
		c.fingerprint = fn
		return nil
	}
}

// WithDoOptions passes options (lease, TTL, waiting for an in-progress
// holder) to keystore.Do. Middleware only.
func WithDoOptions(opts ...keystore.Option) Option {
	return func(c *config) error {
		for _, o := range opts {
			if o == nil {
				return invalid("nil keystore option")
			}
		}
		c.doOpts = append(c.doOpts, opts...)
		return nil
	}
}

func uuidKey(msg *message.Message) (string, error) {
	if msg.UUID == "" {
		return "", idem.Permanent(fmt.Errorf("%w: empty UUID", ErrMissingKey))
	}
	return msg.UUID, nil
}

func (c *config) keyOf(msg *message.Message) (string, []byte, error) {
	key, err := c.key(msg)
	if err == nil {
		err = idem.ValidateKey(key)
	}
	if err != nil {
		return "", nil, fmt.Errorf("idemwatermill: key: %w", err)
	}
	var fp []byte
	if c.fingerprint != nil {
		fp = c.fingerprint(msg)
	}
	return key, fp, nil
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
	if s == nil {
		return nil, invalid("nil store")
	}
	cfg, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{s: s, cfg: cfg}, nil
}

// Middleware is the message.HandlerMiddleware: router.AddMiddleware(m.Middleware).
//
// Outcomes: a new key runs h; its produced messages are stored as the key's
// result and returned. A completed key does not run h and returns the stored
// produced messages again (so a crash between completion and publishing loses
// nothing; the publish may repeat, with the same UUIDs). A key in progress
// elsewhere returns an error wrapping keystore.ErrInProgress (the message is
// nacked and redelivered), unless WithDoOptions(keystore.WithWait(...)) is
// given. A store that cannot answer returns its error: fail closed, nack.
//
// What happens if the process dies: before the handler's effect, the lease
// expires and the redelivery runs h; after the effect and before completion,
// the redelivery runs h again once the lease expires (pass the key downstream
// so that the repeat is absorbed there); after completion, the redelivery is
// acknowledged as a duplicate.
func (m *Middleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		key, fp, err := m.cfg.keyOf(msg)
		if err != nil {
			return nil, err
		}
		var produced []*message.Message
		res, replayed, err := keystore.Do(msg.Context(), m.s, key, fp, func(ctx context.Context) ([]byte, error) {
			out, err := h(msg)
			if err != nil {
				return nil, err
			}
			produced = out
			return encode(out)
		}, m.cfg.doOpts...)
		if err != nil {
			return nil, fmt.Errorf("idemwatermill: %s: %w", key, err)
		}
		if !replayed {
			return produced, nil
		}
		return decode(res)
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
