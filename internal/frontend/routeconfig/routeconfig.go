// Package routeconfig holds the rules of a route's idempotency settings as
// a configuration writes them (idem serve's --config file, a Caddyfile's
// idempotency block, the Caddy module's JSON): which values each field
// takes, which fields contradict each other, what an omitted field
// implies, and the idemhttp options a valid route turns into. Every front
// end that reads such settings checks them here, so that one rule has one
// implementation and every front end words its errors the same way.
package routeconfig

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idem-go/idem/idemhttp"
)

// Route is one route's settings as written. A nil field was omitted: the
// front end's default applies.
type Route struct {
	Key                *string // required | optional
	TTL, Lease, Wait   *time.Duration
	Methods            []string
	FingerprintHeaders []string
	Scope              *Scope
	Store4xx, Store5xx *bool
	KeyFrom            *KeyFrom
	Fingerprint        *string // raw | json | fields
	FingerprintFields  []string
	MaxBody            *int64
	MaxResponse        *int
	Quota              *Quota
}

// Scope names the principal keys are scoped by: one of a header, a
// cookie, the Authorization header, or a front end's own function (Func,
// a Caddy placeholder say); Anonymous lets requests without it share one
// scope.
type Scope struct {
	Header        string
	Cookie        string
	Authorization bool
	Func          func(*http.Request) (string, error)
	FuncName      string // what Func reads, for messages
	Anonymous     bool
}

// KeyFrom names where the requests carry their key when not in the
// Idempotency-Key header: one of a header, CloudEvents, or a JMESPath
// expression over the JSON body.
type KeyFrom struct {
	Header      string
	CloudEvents bool
	JSON        string
}

// FieldError is one invalid field: Field is its name as the configuration
// writes it ("key-from"), Problem what is wrong and what to write instead.
type FieldError struct {
	Field, Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Settings is a checked [Route]. Nil and zero fields were omitted.
type Settings struct {
	Required           *bool
	TTL, Lease, Wait   time.Duration
	Methods            []string
	FingerprintHeaders []string
	Scope              *Scope
	Store4xx, Store5xx *bool
	KeySource          *idemhttp.KeySource
	BodyFingerprint    *idemhttp.BodyFingerprint
	MaxBody            int64
	MaxResponse        int
	Quota              *idemhttp.Quota
}

// Check validates r. Every invalid field is reported, in the order of
// Route's fields; Settings holds the valid ones. A key-from source makes
// the key required unless key says optional: a webhook route whose
// requests lack their key is misconfigured.
func Check(r Route) (Settings, []*FieldError) {
	var s Settings
	var errs []*FieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{field, fmt.Sprintf(format, args...)})
	}
	if r.Key != nil {
		switch *r.Key {
		case "required", "optional":
			req := *r.Key == "required"
			s.Required = &req
		default:
			bad("key", "%q: want required or optional", *r.Key)
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		to   *time.Duration
		zero bool
	}{{"ttl", r.TTL, &s.TTL, false}, {"lease", r.Lease, &s.Lease, false}, {"wait", r.Wait, &s.Wait, true}} {
		switch {
		case d.v == nil:
		case *d.v < 0 || (*d.v == 0 && !d.zero):
			if d.zero {
				bad(d.name, "%v must not be negative", *d.v)
			} else {
				bad(d.name, "%v must be positive", *d.v)
			}
		default:
			*d.to = *d.v
		}
	}
	if r.Methods != nil && len(r.Methods) == 0 {
		bad("methods", "empty list (omit it for the default, POST and PATCH)")
	}
	for _, m := range r.Methods {
		m = strings.ToUpper(strings.TrimSpace(m))
		if m == "" || strings.ContainsAny(m, " \t,/") {
			bad("methods", "%q is not a method", m)
		}
		s.Methods = append(s.Methods, m)
	}
	for _, h := range r.FingerprintHeaders {
		if h = strings.TrimSpace(h); !isHeaderName(h) {
			bad("fingerprint-headers", "%q is not a header name", h)
		}
		s.FingerprintHeaders = append(s.FingerprintHeaders, strings.TrimSpace(h))
	}
	if sc := r.Scope; sc != nil {
		checkScope(sc, bad)
		s.Scope = sc
	}
	s.Store4xx, s.Store5xx = r.Store4xx, r.Store5xx
	if k := r.KeyFrom; k != nil {
		var src idemhttp.KeySource
		named := 0
		if k.Header != "" {
			named, src = named+1, idemhttp.KeyFromHeader(k.Header)
		}
		if k.CloudEvents {
			named, src = named+1, idemhttp.KeyFromCloudEvents()
		}
		if k.JSON != "" {
			named, src = named+1, idemhttp.KeyFromJSON(k.JSON)
		}
		switch err := src.Validate(); {
		case named != 1:
			bad("key-from", "name one of header, cloudevents or json")
		case err != nil:
			bad("key-from", "%s", strings.TrimPrefix(err.Error(), "idemhttp: "))
		default:
			s.KeySource = &src
			if s.Required == nil && r.Key == nil {
				req := true
				s.Required = &req
			}
		}
	}
	if r.Fingerprint != nil || r.FingerprintFields != nil {
		mode := "fields"
		if r.Fingerprint != nil {
			mode = *r.Fingerprint
		}
		var fp idemhttp.BodyFingerprint
		ok := true
		switch {
		case mode == "raw" && r.FingerprintFields == nil:
			fp = idemhttp.RawBody()
		case mode == "json" && r.FingerprintFields == nil:
			fp = idemhttp.CanonicalJSON()
		case mode == "fields":
			fp = idemhttp.JSONFields(r.FingerprintFields...)
		case mode == "raw" || mode == "json":
			ok = false
			bad("fingerprint-fields", "contradicts fingerprint: %s (fingerprint-fields goes with fingerprint fields, or with no fingerprint)", mode)
		default:
			ok = false
			bad("fingerprint", "%q: want raw, json or fields", mode)
		}
		if !ok {
		} else if err := fp.Validate(); err != nil {
			bad("fingerprint-fields", "%s", strings.TrimPrefix(err.Error(), "idemhttp: "))
		} else {
			s.BodyFingerprint = &fp
		}
	}
	if r.MaxBody != nil {
		if *r.MaxBody <= 0 {
			bad("max-body", "%d must be positive", *r.MaxBody)
		}
		s.MaxBody = *r.MaxBody
	}
	if r.MaxResponse != nil {
		if *r.MaxResponse <= 0 {
			bad("max-response", "%d must be positive", *r.MaxResponse)
		}
		s.MaxResponse = *r.MaxResponse
	}
	if r.Quota != nil {
		if q, ok := checkQuota(*r.Quota, bad); ok {
			s.Quota = &q
		}
	}
	return s, errs
}

func checkScope(sc *Scope, bad func(field, format string, args ...any)) {
	named := 0
	for _, set := range []bool{sc.Header != "", sc.Cookie != "", sc.Authorization, sc.Func != nil} {
		if set {
			named++
		}
	}
	switch {
	case named > 1:
		bad("scope", "name one of %s", principals(sc))
	case named == 0 && !sc.Anonymous:
		bad("scope", "names no principal (%s, or anonymous)", principals(sc))
	case sc.Anonymous && sc.Header != "":
		bad("scope", "anonymous contradicts header %s (a request without the header is refused, never anonymous)", sc.Header)
	case sc.Header != "" && !isHeaderName(sc.Header):
		bad("scope", "header %q is not a header name", sc.Header)
	case strings.ContainsAny(sc.Cookie, " \t;=,\""):
		bad("scope", "cookie %q is not a cookie name", sc.Cookie)
	}
}

// principals lists the principals a scope can name.
func principals(sc *Scope) string {
	if sc.FuncName != "" {
		return "header, cookie, authorization or " + sc.FuncName
	}
	return "header, cookie or authorization"
}

func isHeaderName(h string) bool { return h != "" && !strings.ContainsAny(h, " \t:") }

// Options are the idemhttp options of the fields s sets, in a fixed order;
// the front end adds its own (store, logger, hooks, budget) and its
// defaults for the fields s leaves unset, before these.
func (s Settings) Options() []idemhttp.Option {
	var opts []idemhttp.Option
	add := func(o ...idemhttp.Option) { opts = append(opts, o...) }
	if s.Required != nil {
		add(idemhttp.WithRequired(*s.Required))
	}
	if s.TTL > 0 {
		add(idemhttp.WithTTL(s.TTL))
	}
	if s.Lease > 0 {
		add(idemhttp.WithLease(s.Lease))
	}
	if s.Wait > 0 {
		add(idemhttp.WithWait(s.Wait))
	}
	if s.Methods != nil {
		add(idemhttp.WithMethods(s.Methods...))
	}
	if len(s.FingerprintHeaders) > 0 {
		add(idemhttp.WithFingerprintHeaders(s.FingerprintHeaders...))
	}
	if sc := s.Scope; sc != nil {
		switch {
		case sc.Header != "":
			add(idemhttp.WithScopeHeader(sc.Header))
		case sc.Cookie != "":
			add(idemhttp.WithScopeCookie(sc.Cookie))
		case sc.Func != nil:
			add(idemhttp.WithScopeFunc(sc.Func))
		}
		add(idemhttp.WithAllowAnonymous(sc.Anonymous))
	}
	if s.Store4xx != nil {
		add(idemhttp.WithStore4xx(*s.Store4xx))
	}
	if s.Store5xx != nil {
		add(idemhttp.WithStore5xx(*s.Store5xx))
	}
	if s.KeySource != nil {
		add(idemhttp.WithKeySource(*s.KeySource))
	}
	if s.BodyFingerprint != nil {
		add(idemhttp.WithBodyFingerprint(*s.BodyFingerprint))
	}
	if s.MaxBody > 0 {
		add(idemhttp.WithMaxRequestBody(s.MaxBody))
	}
	if s.MaxResponse > 0 {
		add(idemhttp.WithMaxResponseBody(s.MaxResponse))
	}
	if s.Quota != nil {
		add(idemhttp.WithQuota(*s.Quota))
	}
	return opts
}

// Join is errs as one error, each prefixed by prefix (the file and line,
// the directive), wrapping base.
func Join(base error, prefix string, errs []*FieldError) error {
	var all []error
	for _, e := range errs {
		all = append(all, fmt.Errorf("%w: %s%s", base, prefix, e))
	}
	return errors.Join(all...)
}
