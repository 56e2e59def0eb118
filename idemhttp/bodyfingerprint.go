package idemhttp

import (
	"fmt"
	"strconv"

	jmespath "github.com/jmespath-community/go-jmespath"
)

// BodyFingerprint says what of the request body the fingerprint covers (the
// method, path, query and fingerprinted headers are always in it, see
// [Fingerprint]). Pass it to [WithBodyFingerprint].
type BodyFingerprint struct {
	mode  fpMode
	exprs []string
}

type fpMode int

const (
	fpRaw fpMode = iota
	fpJSON
	fpFields
)

// RawBody fingerprints the body's bytes as they arrive: the default. A
// retry whose JSON was re-encoded (keys reordered, other white space or
// escapes) is a different request, answered 422 "key-reused".
func RawBody() BodyFingerprint { return BodyFingerprint{mode: fpRaw} }

// CanonicalJSON fingerprints the body's canonical JSON (RFC 8785, JCS):
// names sorted, white space dropped, strings and numbers written one way.
// A retry that means the same JSON is the same request, whatever encoder
// sent it. Numbers are compared as IEEE 754 doubles, as JCS says; an
// integer beyond ±2^53, a name repeated in an object, or nesting deeper
// than [MaxJSONDepth] is refused with 400 "invalid-json-body", and so is a
// non-empty body that is not JSON. An empty body is fingerprinted as empty.
func CanonicalJSON() BodyFingerprint { return BodyFingerprint{mode: fpJSON} }

// JSONFields fingerprints only the parts of a JSON body that define the
// operation: the canonical JSON of the list of each JMESPath expression's
// result ("amount", "currency", "customer.id"), as Powertools' payload
// validation does. Fields outside the selection (a timestamp, a trace id)
// may differ on a retry; an absent field is null. The body is checked as
// for [CanonicalJSON].
func JSONFields(exprs ...string) BodyFingerprint {
	return BodyFingerprint{mode: fpFields, exprs: append([]string(nil), exprs...)}
}

// String is the form the configuration writes: raw, json, or fields[...].
func (b BodyFingerprint) String() string {
	switch b.mode {
	case fpJSON:
		return "json"
	case fpFields:
		return fmt.Sprintf("fields%q", b.exprs)
	}
	return "raw"
}

// WithBodyFingerprint sets what of the body the fingerprint covers (default
// [RawBody]). Changing it on a route whose keys are in flight answers their
// retries 422 until those keys expire, since their stored fingerprints were
// computed the old way.
func WithBodyFingerprint(b BodyFingerprint) Option {
	return func(c *config) error {
		spec, err := b.compile()
		if err != nil {
			return err
		}
		c.bodyFP = spec
		return nil
	}
}

// Validate reports what [WithBodyFingerprint] would refuse in b: no field,
// or a JMESPath expression that does not compile. Its errors wrap
// idem.ErrInvalidOption.
func (b BodyFingerprint) Validate() error {
	_, err := b.compile()
	return err
}

func (b BodyFingerprint) compile() (bodyFPSpec, error) {
	spec := bodyFPSpec{mode: b.mode}
	switch b.mode {
	case fpRaw, fpJSON:
	case fpFields:
		if len(b.exprs) == 0 {
			return spec, invalid("JSONFields needs at least one expression")
		}
		for _, e := range b.exprs {
			p, err := compilePath(e)
			if err != nil {
				return spec, err
			}
			spec.paths = append(spec.paths, p)
		}
	default:
		return spec, invalid("unknown body fingerprint")
	}
	return spec, nil
}

type bodyFPSpec struct {
	mode  fpMode
	paths []jmespath.JMESPath
}

// input is what Fingerprint hashes as the body. The canonical modes are
// tagged, so that no canonical form equals a raw body fingerprinted before
// the route's mode changed.
func (s *bodyFPSpec) input(b *jsonBody) ([]byte, error) {
	if s.mode == fpRaw || len(b.raw) == 0 {
		return b.raw, nil
	}
	if s.mode == fpJSON {
		c, err := b.canonical()
		if err != nil {
			return nil, err
		}
		return append([]byte("\x00jcs\x00"), c...), nil
	}
	v, err := b.value()
	if err != nil {
		return nil, err
	}
	sel := make([]any, len(s.paths))
	for i, p := range s.paths {
		if sel[i], err = p.Search(v); err != nil {
			return nil, fmt.Errorf("%w: field %d: %v", ErrJSONBody, i, err)
		}
	}
	c, err := canonicalValue(sel)
	if err != nil {
		return nil, err
	}
	return append([]byte("\x00fields:"+strconv.Itoa(len(s.paths))+"\x00"), c...), nil
}
