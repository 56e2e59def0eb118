package idemhttp

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idem-go/idem"
	jmespath "github.com/jmespath-community/go-jmespath"
)

// KeySource says where a route's requests carry their idempotency key: the
// Idempotency-Key header (the default), another header, a CloudEvent's
// (source, id), or a field of a JSON body. Webhook and event senders put
// their delivery id in one of these and retry with the same one. Pass it to
// [WithKeySource]; it is validated there.
//
// Whatever the source, the key is scoped by the route's principal (see
// [WithScopeHeader], [WithScopeFunc], [WithAllowAnonymous]) and stored as a
// digest, and the rest of the middleware (fingerprint, replay, 409, 422,
// leases) is the same.
type KeySource struct {
	kind   keyKind
	header string // keyHeader: canonical name
	expr   string // keyJSON
}

type keyKind int

const (
	keyIdempotency keyKind = iota
	keyHeader
	keyCloudEvents
	keyJSON
)

// KeyFromIdempotencyKey is the default source: the Idempotency-Key header,
// an RFC 9651 Structured Field String (see [ParseKey]).
func KeyFromIdempotencyKey() KeySource { return KeySource{kind: keyIdempotency} }

// KeyFromHeader takes the key from the named header's raw value, as webhook
// senders put their delivery id: X-GitHub-Delivery (GitHub),
// X-Shopify-Webhook-Id (Shopify), webhook-id (Standard Webhooks, Svix). The
// value is not a structured field: white space around it is trimmed, and it
// must be 1 to 255 bytes of UTF-8 without control characters. A request
// with the header twice is refused.
func KeyFromHeader(name string) KeySource {
	return KeySource{kind: keyHeader, header: http.CanonicalHeaderKey(strings.TrimSpace(name))}
}

// KeyFromCloudEvents takes the key from a CloudEvent sent over HTTP: in
// binary mode from the ce-id and ce-source headers, in structured mode
// (Content-Type: application/cloudevents+json) from the id and source
// attributes of the JSON body. CloudEvents makes id unique within a
// source, so the key is the pair: the source is added to the principal's
// scope (two events with one id from two sources are two keys) and the id
// is the key. Batches (application/cloudevents-batch+json) are refused with
// 400 "invalid-key": each event needs its own key.
func KeyFromCloudEvents() KeySource { return KeySource{kind: keyCloudEvents} }

// KeyFromJSON takes the key from the request's JSON body by a JMESPath
// expression ("id", "detail.id", "data.object.id", "[order_id, line]"), as
// AWS Lambda Powertools does. A string result is the key; a number, a
// boolean, an array or an object is keyed by its canonical JSON (RFC 8785);
// null (the field is absent) is a missing key. The body is bounded by
// [WithMaxRequestBody] and [MaxJSONDepth] before it is parsed; a body that
// is not JSON is refused with 400 "invalid-json-body".
func KeyFromJSON(expr string) KeySource { return KeySource{kind: keyJSON, expr: expr} }

// String names where the key is expected, as problems and logs say it.
func (s KeySource) String() string {
	switch s.kind {
	case keyHeader:
		return "the " + s.header + " header"
	case keyCloudEvents:
		return "the CloudEvent's id and source (ce-id and ce-source headers, or the id and source of an application/cloudevents+json body)"
	case keyJSON:
		return "the JSON body at " + strconv.Quote(s.expr)
	}
	return "the " + HeaderKey + " header"
}

// WithKeySource sets where requests carry their key (default
// [KeyFromIdempotencyKey]). Under any other source a missing key is
// answered 400 "missing-key", naming where the key was expected, unless
// [WithRequired](false) is also given (then such a request passes through
// unprotected); a webhook sender retries a 400 until it gives up, so a
// route that receives events without a key is misconfigured. The
// Idempotency-Key header is echoed only under the default source.
func WithKeySource(s KeySource) Option {
	return func(c *config) error {
		k, err := s.compile()
		if err != nil {
			return err
		}
		c.keys = k
		return nil
	}
}

// Validate reports what [WithKeySource] would refuse in s: a header name
// that is not one, or a JMESPath expression that does not compile. Its
// errors wrap idem.ErrInvalidOption.
func (s KeySource) Validate() error {
	_, err := s.compile()
	return err
}

func (s KeySource) compile() (keySpec, error) {
	k := keySpec{KeySource: s}
	switch s.kind {
	case keyIdempotency, keyCloudEvents:
	case keyHeader:
		if s.header == "" || strings.ContainsAny(s.header, " \t:") {
			return k, invalid("key header %q is not a header name", s.header)
		}
	case keyJSON:
		p, err := compilePath(s.expr)
		if err != nil {
			return k, err
		}
		k.path = p
	default:
		return k, invalid("unknown key source")
	}
	return k, nil
}

// keySpec is a validated KeySource.
type keySpec struct {
	KeySource
	path jmespath.JMESPath
}

// isDefault reports whether the key is the Idempotency-Key header.
func (k *keySpec) isDefault() bool { return k.kind == keyIdempotency }

// needsBody reports whether r's key is in its body, which must then be read
// (bounded) before the key is known.
func (k *keySpec) needsBody(r *http.Request) bool {
	switch k.kind {
	case keyJSON:
		return true
	case keyCloudEvents:
		return cloudEventsMode(r) != ceBinary
	}
	return false
}

type ceMode int

const (
	ceBinary ceMode = iota
	ceStructured
	ceBatch
)

func cloudEventsMode(r *http.Request) ceMode {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case mt == "application/cloudevents-batch+json":
		return ceBatch
	case strings.HasPrefix(mt, "application/cloudevents"):
		return ceStructured // +json, and any other structured format, refused below
	}
	return ceBinary
}

// extract returns r's key and its sender: the CloudEvents source, added to
// the scope; "" for the other sources. body is r's body when needsBody said
// so. Errors wrap idem.ErrMissingKey, idem.ErrInvalidKey or ErrJSONBody.
func (k *keySpec) extract(r *http.Request, body *jsonBody, strict bool) (key, sender string, err error) {
	switch k.kind {
	case keyHeader:
		key, err = headerValue(r.Header, k.header, k)
		return key, "", err
	case keyCloudEvents:
		return k.cloudEvent(r, body)
	case keyJSON:
		if len(body.raw) == 0 {
			return "", "", fmt.Errorf("idemhttp: no body, so no key in %v: %w", k, idem.ErrMissingKey)
		}
		v, err := body.value()
		if err != nil {
			return "", "", err
		}
		res, err := k.path.Search(v)
		if err != nil {
			return "", "", fmt.Errorf("idemhttp: %v: %v: %w", k, err, idem.ErrInvalidKey)
		}
		key, err = jsonKey(res, k)
		return key, "", err
	}
	key, err = ParseKey(r.Header, strict)
	return key, "", err
}

func (k *keySpec) cloudEvent(r *http.Request, body *jsonBody) (key, source string, err error) {
	switch cloudEventsMode(r) {
	case ceBatch:
		return "", "", fmt.Errorf("idemhttp: a batch of CloudEvents has no one key; send each event on its own: %w", idem.ErrInvalidKey)
	case ceBinary:
		id, err := ceHeader(r.Header, "Ce-Id")
		if err != nil {
			return "", "", err
		}
		source, err := ceHeader(r.Header, "Ce-Source")
		if err != nil {
			return "", "", err
		}
		return id, source, nil
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/cloudevents+json" {
		return "", "", fmt.Errorf("idemhttp: structured CloudEvents in %s are not read (only application/cloudevents+json): %w", mt, idem.ErrInvalidKey)
	}
	if len(body.raw) == 0 {
		return "", "", fmt.Errorf("idemhttp: an application/cloudevents+json request without a body has no id: %w", idem.ErrMissingKey)
	}
	v, err := body.value()
	if err != nil {
		return "", "", err
	}
	ev, _ := v.(map[string]any)
	if ev == nil {
		return "", "", fmt.Errorf("idemhttp: a structured CloudEvent must be a JSON object: %w", idem.ErrInvalidKey)
	}
	attr := func(name string) (string, error) {
		a, ok := ev[name]
		if !ok || a == nil {
			return "", fmt.Errorf("idemhttp: the CloudEvent has no %s attribute: %w", name, idem.ErrMissingKey)
		}
		s, ok := a.(string)
		if !ok {
			return "", fmt.Errorf("idemhttp: the CloudEvent's %s is a %T, not a string: %w", name, a, idem.ErrInvalidKey)
		}
		return checkKey(s, "the CloudEvent's "+name)
	}
	if key, err = attr("id"); err != nil {
		return "", "", err
	}
	if source, err = attr("source"); err != nil {
		return "", "", err
	}
	return key, source, nil
}

// ceHeader reads a binary-mode attribute: percent-encoded as the HTTP
// binding says (§3.1.3.2).
func ceHeader(h http.Header, name string) (string, error) {
	v, err := headerValue(h, name, nil)
	if err != nil {
		return "", err
	}
	d, err := url.PathUnescape(v)
	if err != nil {
		return "", fmt.Errorf("idemhttp: the %s header is not percent-encoded correctly: %w", name, idem.ErrInvalidKey)
	}
	return checkKey(d, "the "+name+" header")
}

// headerValue is the one value of header name, trimmed and checked. where
// names the source in a missing-key error, if not nil.
func headerValue(h http.Header, name string, where fmt.Stringer) (string, error) {
	vals := h.Values(name)
	switch len(vals) {
	case 0:
		if where == nil {
			return "", fmt.Errorf("idemhttp: no %s header: %w", name, idem.ErrMissingKey)
		}
		return "", fmt.Errorf("idemhttp: no key in %v: %w", where, idem.ErrMissingKey)
	case 1:
	default:
		return "", fmt.Errorf("idemhttp: the %s header appears more than once: %w", name, idem.ErrInvalidKey)
	}
	return checkKey(strings.Trim(vals[0], " \t"), "the "+name+" header")
}

// jsonKey turns a JMESPath result into a key.
func jsonKey(res any, where fmt.Stringer) (string, error) {
	switch v := res.(type) {
	case nil:
		return "", fmt.Errorf("idemhttp: no key in %v: %w", where, idem.ErrMissingKey)
	case string:
		return checkKey(v, where.String())
	}
	c, err := canonicalValue(res)
	if err != nil {
		return "", fmt.Errorf("idemhttp: %v: %v: %w", where, err, idem.ErrInvalidKey)
	}
	return checkKey(string(c), where.String())
}

// checkKey bounds a key from a non-default source: 1 to 255 bytes of UTF-8
// without control characters (so that a key never holds the separators of
// the store key's digest input, nor confuses a log line).
func checkKey(s, where string) (string, error) {
	switch {
	case s == "":
		return "", fmt.Errorf("idemhttp: the key in %s is empty: %w", where, idem.ErrInvalidKey)
	case len(s) > idem.MaxKeyLen:
		return "", fmt.Errorf("idemhttp: the key in %s is %d bytes, longer than %d: %w", where, len(s), idem.MaxKeyLen, idem.ErrInvalidKey)
	case !utf8.ValidString(s):
		return "", fmt.Errorf("idemhttp: the key in %s is not UTF-8: %w", where, idem.ErrInvalidKey)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "", fmt.Errorf("idemhttp: the key in %s holds a control character: %w", where, idem.ErrInvalidKey)
	}
	return s, nil
}

// senderScope adds a sender (the CloudEvents source) to a principal's
// scope, length-prefixed so that no scope and source pair can spell
// another's.
func senderScope(scope, sender string) string {
	if sender == "" {
		return scope
	}
	return scope + "\x00source:" + strconv.Itoa(len(sender)) + ":" + sender
}
