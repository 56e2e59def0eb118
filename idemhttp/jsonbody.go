package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	"github.com/idem-go/idem"
	jmespath "github.com/jmespath-community/go-jmespath"
)

// MaxJSONDepth is the deepest nesting of arrays and objects a request body
// may have on a route that reads it as JSON (a key taken from the body, a
// CloudEvent in structured mode, or a JSON fingerprint). A deeper body is
// refused with 400 "invalid-json-body" before any store I/O. The body is
// bounded in size by [WithMaxRequestBody] before it is parsed.
const MaxJSONDepth = 64

// maxSafeInteger is 2^53: the largest integer every JSON reader (and RFC
// 8785's IEEE 754 numbers) holds exactly.
const maxSafeInteger = 1 << 53

// ErrJSONBody is wrapped by the errors of a request body that a route reads
// as JSON and that is not JSON it can read: not JSON, nested deeper than
// [MaxJSONDepth], an object with a repeated name, or an integer beyond
// ±2^53 (such numbers lose precision in canonical JSON, so two different
// amounts would share a fingerprint: send them as strings, as RFC 7493
// I-JSON says).
var ErrJSONBody = errors.New("idemhttp: the request body is not JSON this route can read")

// jsonBody is one request's body read as JSON, checked and decoded at most
// once for the key source and the fingerprint together.
type jsonBody struct {
	raw     []byte
	checked bool
	err     error
	v       any
	decoded bool
}

// check validates the body as I-JSON within the bounds above.
func (b *jsonBody) check() error {
	if !b.checked {
		b.checked, b.err = true, checkJSON(b.raw)
	}
	return b.err
}

// value is the body decoded as encoding/json does (numbers as float64),
// the shape JMESPath searches.
func (b *jsonBody) value() (any, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if !b.decoded {
		b.decoded = true
		if err := json.Unmarshal(b.raw, &b.v); err != nil {
			b.err = fmt.Errorf("%w: %v", ErrJSONBody, err)
		}
	}
	return b.v, b.err
}

// canonical is the body's RFC 8785 (JCS) canonical form.
func (b *jsonBody) canonical() ([]byte, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	c, err := jcs.Transform(b.raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJSONBody, err)
	}
	return c, nil
}

// checkJSON walks raw's tokens once: one JSON value, valid UTF-8, nested at
// most MaxJSONDepth deep, no object with a repeated name, no integer beyond
// ±2^53, no lone surrogate escape (encoding/json would read "\ud800" as
// U+FFFD, the same string as "\ufffd").
func checkJSON(raw []byte) error {
	if !utf8.Valid(raw) {
		return fmt.Errorf("%w: not valid UTF-8", ErrJSONBody)
	}
	if err := checkSurrogates(raw); err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	type level struct {
		object bool
		names  map[string]bool
		isName bool // the next token of an object is a name
	}
	var stack []level
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			if len(stack) == 0 && d.InputOffset() > 0 {
				return nil
			}
			return fmt.Errorf("%w: unexpected end", ErrJSONBody)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrJSONBody, err)
		}
		var top *level
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if top != nil && top.object && top.isName {
			if name, ok := tok.(string); ok {
				if top.names[name] {
					return fmt.Errorf("%w: the name %q appears twice in one object", ErrJSONBody, name)
				}
				top.names[name] = true
				top.isName = false
				continue
			}
		} else if top != nil && top.object {
			top.isName = true // this token is a value; a name follows
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) == MaxJSONDepth {
					return fmt.Errorf("%w: nested deeper than %d", ErrJSONBody, MaxJSONDepth)
				}
				stack = append(stack, level{object: t == '{', names: map[string]bool{}, isName: t == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
		case json.Number:
			if err := checkNumber(string(t)); err != nil {
				return err
			}
		}
		if len(stack) == 0 {
			// One value only: anything but white space after it is an error.
			if _, err := d.Token(); !errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: more than one JSON value", ErrJSONBody)
			}
			return nil
		}
	}
}

// checkSurrogates refuses a \u escape of a surrogate that is not a high
// one followed by a low one. A backslash appears only inside strings in
// JSON, so escapes can be found without tracking strings; what is not JSON
// at all is refused by the token walk.
func checkSurrogates(raw []byte) error {
	u := func(i int) (rune, bool) { // the \uXXXX escape at raw[i:], if it is one
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := u(i)
		if !ok {
			i++ // an escape of one character (\\ included)
			continue
		}
		switch {
		case r >= 0xd800 && r <= 0xdbff:
			if lo, ok := u(i + 6); !ok || lo < 0xdc00 || lo > 0xdfff {
				return fmt.Errorf("%w: a lone surrogate \\u%04x at byte %d", ErrJSONBody, r, i)
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return fmt.Errorf("%w: a lone surrogate \\u%04x at byte %d", ErrJSONBody, r, i)
		default:
			i += 5
		}
	}
	return nil
}

func checkNumber(s string) error {
	if strings.ContainsAny(s, ".eE") {
		return nil // a fraction: rounded to the nearest double, as every reader does
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxSafeInteger || n < -maxSafeInteger {
		return fmt.Errorf("%w: the integer %s is beyond ±2^53 and would lose precision (send it as a string)", ErrJSONBody, s)
	}
	return nil
}

// canonicalValue is the RFC 8785 canonical JSON of v, a value decoded by
// encoding/json or returned by a JMESPath search.
func canonicalValue(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJSONBody, err)
	}
	return jcs.Transform(b)
}

// compilePath compiles a JMESPath expression of a route's configuration.
func compilePath(expr string) (jmespath.JMESPath, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, invalid("empty JMESPath expression")
	}
	p, err := jmespath.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("idemhttp: JMESPath expression %q: %v: %w", expr, err, idem.ErrInvalidOption)
	}
	return p, nil
}
