package main

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/frontend/routeconfig"
)

// errConfig is wrapped by every error in a --config file; each names the
// file and the line.
var errConfig = errors.New("invalid config")

// configFile is the schema of the --config file (YAML). Every field a route
// omits takes the value of the matching flag.
type configFile struct {
	Routes []ast.Node `yaml:"routes"`
}

// routeFile is one route as written; pointers tell an omitted field from a
// zero one.
type routeFile struct {
	Pattern            string     `yaml:"pattern"`
	PassThrough        *bool      `yaml:"pass-through"`
	Key                *string    `yaml:"key"` // required | optional
	TTL                *duration  `yaml:"ttl"`
	Lease              *duration  `yaml:"lease"`
	Methods            []string   `yaml:"methods"`
	FingerprintHeaders []string   `yaml:"fingerprint-headers"`
	Scope              *scopeFile `yaml:"scope"`
	Store5xx           *bool      `yaml:"store-5xx"`
	Store4xx           *bool      `yaml:"store-4xx"`
	KeyFrom            *keyFrom   `yaml:"key-from"`
	Fingerprint        *string    `yaml:"fingerprint"` // raw | json | fields
	FingerprintFields  []string   `yaml:"fingerprint-fields"`
	MaxBody            *int64     `yaml:"max-body"`
	MaxResponse        *int       `yaml:"max-response"`
	Quota              *quotaFile `yaml:"quota"`
}

// quotaFile bounds what a route's clients may keep in the store: key
// counts, and byte sizes with a unit ("10MiB"). See routeconfig.Quota.
type quotaFile struct {
	PrincipalKeys  yamlText `yaml:"principal-keys"`
	PrincipalBytes yamlText `yaml:"principal-bytes"`
	Keys           yamlText `yaml:"keys"`
	Bytes          yamlText `yaml:"bytes"`
}

// yamlText is a scalar as written (a number or a size such as 10MiB),
// checked by routeconfig.
type yamlText string

// UnmarshalYAML implements yaml.BytesUnmarshaler.
func (t *yamlText) UnmarshalYAML(b []byte) error {
	*t = yamlText(strings.Trim(strings.TrimSpace(string(b)), `"'`))
	return nil
}

// scopeFile names the principal keys are scoped by: one of header, cookie
// or authorization, and anonymous only when it is named.
type scopeFile struct {
	Header        string `yaml:"header"`
	Cookie        string `yaml:"cookie"`
	Authorization bool   `yaml:"authorization"`
	Anonymous     bool   `yaml:"anonymous"`
}

// keyFrom names where a route's requests carry their key, when not in the
// Idempotency-Key header: one of a header, CloudEvents, or a JMESPath
// expression over the JSON body.
type keyFrom struct {
	Header      string `yaml:"header"`
	CloudEvents bool   `yaml:"cloudevents"`
	JSON        string `yaml:"json"`
}

// duration is a Go duration ("90s", "24h") that also takes whole days in
// front ("7d", "1d12h"), since retention is counted in days.
type duration time.Duration

var daysRE = regexp.MustCompile(`^(-?)(\d{1,5})d(.*)$`)

// UnmarshalYAML implements yaml.BytesUnmarshaler.
func (d *duration) UnmarshalYAML(b []byte) error {
	v, err := parseDuration(strings.Trim(strings.TrimSpace(string(b)), `"'`))
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// parseDuration is the duration syntax of the --config file and of every
// duration flag: a Go duration, with whole days allowed in front.
func parseDuration(s string) (time.Duration, error) {
	in := s
	var days time.Duration
	neg := false
	if m := daysRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[2])
		days, neg, s = time.Duration(n)*24*time.Hour, m[1] == "-", m[3]
		if s == "" {
			s = "0s"
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil || (days > 0 && strings.HasPrefix(s, "-")) {
		return 0, fmt.Errorf("duration %q: want a Go duration such as 90s or 24h, or days such as 7d", in)
	}
	v += days
	if neg {
		v = -v
	}
	return v, nil
}

// route is one validated route of a --config file. Nil and zero fields were
// omitted and take the flags' values.
type route struct {
	line        int
	pattern     string
	patMethod   string // the pattern's method, if it has one
	passThrough bool
	required    *bool
	ttl, lease  time.Duration
	methods     []string
	fpHeaders   []string
	scope       *scopeFile
	store5xx    *bool
	store4xx    *bool
	keySource   *idemhttp.KeySource
	bodyFP      *idemhttp.BodyFingerprint
	maxBody     int64
	maxResponse int
	quota       *idemhttp.Quota
}

// parseConfig parses and validates a --config file on its own (what does
// not depend on the flags). name prefixes every error, with the line. A
// file too large or nested too deep is refused before the YAML parser runs
// (checkConfigShape), so that no file can exhaust the process's memory.
func parseConfig(name string, data []byte) ([]route, error) {
	if err := checkConfigShape(name, data); err != nil {
		return nil, err
	}
	var f configFile
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.Strict()); err != nil {
		return nil, yamlError(name, err, 0)
	}
	if len(f.Routes) == 0 {
		return nil, fmt.Errorf("%w: %s: no routes (want a top-level routes: list)", errConfig, name)
	}
	var errs []error
	var routes []route
	seen := map[string]int{}
	mux := http.NewServeMux()
	for i, n := range f.Routes {
		r, err := parseRoute(name, i, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		at := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: %s:%d: routes[%d] %q: %s", errConfig, name, r.line, i, r.pattern, fmt.Sprintf(format, args...)))
		}
		if first, dup := seen[r.pattern]; dup {
			at("the same pattern as the route at line %d", first)
			continue
		}
		seen[r.pattern] = r.line
		if err := register(mux, r.pattern, http.NotFoundHandler()); err != nil {
			at("%v", err)
			continue
		}
		routes = append(routes, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return routes, nil
}

// register adds pattern to mux, turning ServeMux's panic on an invalid or
// conflicting pattern into an error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pattern: %v", p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// yamlError turns a parser or decoder error into "file:line: message", at
// line when the error carries no position.
func yamlError(name string, err error, line int) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		return fmt.Errorf("%w: %s:%d: %s", errConfig, name, ye.GetToken().Position.Line, ye.GetMessage())
	}
	if line > 0 {
		return fmt.Errorf("%w: %s:%d: %v", errConfig, name, line, err)
	}
	return fmt.Errorf("%w: %s: %v", errConfig, name, err)
}

func parseRoute(name string, i int, n ast.Node) (route, error) {
	if n == nil {
		return route{}, fmt.Errorf("%w: %s: routes[%d]: empty route", errConfig, name, i)
	}
	line := 0
	if tk := n.GetToken(); tk != nil {
		line = tk.Position.Line
	}
	var rf routeFile
	if err := yaml.NodeToValue(n, &rf, yaml.Strict()); err != nil {
		return route{}, fmt.Errorf("%w (routes[%d])", yamlError(name, err, line), i)
	}
	r := route{line: line, pattern: strings.Join(strings.Fields(rf.Pattern), " ")}
	var errs []error
	bad := func(field, format string, args ...any) {
		l := keyLine(n, field, line)
		errs = append(errs, fmt.Errorf("%w: %s:%d: routes[%d] %q: %s: %s", errConfig, name, l, i, r.pattern, field, fmt.Sprintf(format, args...)))
	}
	if r.pattern == "" {
		bad("pattern", "missing (a Go ServeMux pattern such as \"POST /v1/charges\" or \"/v1/search/\")")
	}
	if m, _, ok := strings.Cut(r.pattern, " "); ok {
		r.patMethod = m
	}
	r.passThrough = rf.PassThrough != nil && *rf.PassThrough
	if r.passThrough {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"key", rf.Key != nil}, {"ttl", rf.TTL != nil}, {"lease", rf.Lease != nil}, {"methods", rf.Methods != nil},
			{"fingerprint-headers", rf.FingerprintHeaders != nil}, {"scope", rf.Scope != nil}, {"store-5xx", rf.Store5xx != nil},
			{"max-body", rf.MaxBody != nil}, {"max-response", rf.MaxResponse != nil}, {"store-4xx", rf.Store4xx != nil},
			{"key-from", rf.KeyFrom != nil}, {"fingerprint", rf.Fingerprint != nil}, {"fingerprint-fields", rf.FingerprintFields != nil},
			{"quota", rf.Quota != nil},
		} {
			if f.set {
				bad(f.name, "contradicts pass-through: true (a pass-through route uses no key)")
			}
		}
	}
	// The rules of each field are routeconfig's, shared with the Caddy
	// module; only the pattern's and pass-through's are idem serve's own.
	rc := routeconfig.Route{
		Key: rf.Key, TTL: (*time.Duration)(rf.TTL), Lease: (*time.Duration)(rf.Lease), Methods: rf.Methods,
		FingerprintHeaders: rf.FingerprintHeaders, Store4xx: rf.Store4xx, Store5xx: rf.Store5xx,
		Fingerprint: rf.Fingerprint, FingerprintFields: rf.FingerprintFields, MaxBody: rf.MaxBody, MaxResponse: rf.MaxResponse,
	}
	if s := rf.Scope; s != nil {
		rc.Scope = &routeconfig.Scope{Header: s.Header, Cookie: s.Cookie, Authorization: s.Authorization, Anonymous: s.Anonymous}
	}
	if k := rf.KeyFrom; k != nil {
		rc.KeyFrom = &routeconfig.KeyFrom{Header: k.Header, CloudEvents: k.CloudEvents, JSON: k.JSON}
	}
	if q := rf.Quota; q != nil {
		rc.Quota = &routeconfig.Quota{PrincipalKeys: string(q.PrincipalKeys), PrincipalBytes: string(q.PrincipalBytes), Keys: string(q.Keys), Bytes: string(q.Bytes)}
	}
	set, problems := routeconfig.Check(rc)
	for _, p := range problems {
		if p.Field == "key-from" && strings.HasPrefix(p.Problem, "name one of") {
			p.Problem = "name one of header, cloudevents: true or json"
		}
		bad(p.Field, "%s", p.Problem)
	}
	r.required, r.ttl, r.lease, r.fpHeaders = set.Required, set.TTL, set.Lease, set.FingerprintHeaders
	r.store4xx, r.store5xx, r.keySource, r.bodyFP = set.Store4xx, set.Store5xx, set.KeySource, set.BodyFingerprint
	r.maxBody, r.maxResponse, r.quota = set.MaxBody, set.MaxResponse, set.Quota
	if set.Scope != nil {
		r.scope = rf.Scope
	}
	if r.passThrough {
		r.required = nil // no key: a key-from source implies none
	}
	for _, m := range set.Methods {
		if r.patMethod != "" && m != "" && !strings.ContainsAny(m, " \t,/") && m != r.patMethod && !(r.patMethod == http.MethodGet && m == http.MethodHead) {
			bad("methods", "%s never reaches a route whose pattern is for %s only", m, r.patMethod)
		}
	}
	r.methods = set.Methods
	if r.methods == nil && r.patMethod != "" && !r.passThrough {
		r.methods = []string{r.patMethod} // the pattern's method is the one keyed
	}
	return r, errors.Join(errs...)
}

// keyLine is the line of field's key in the route's mapping, else def.
func keyLine(n ast.Node, field string, def int) int {
	m, ok := n.(*ast.MappingNode)
	if !ok {
		if mv, ok := n.(*ast.MappingValueNode); ok {
			m = &ast.MappingNode{Values: []*ast.MappingValueNode{mv}}
		} else {
			return def
		}
	}
	for _, v := range m.Values {
		if v.Key != nil && v.Key.GetToken() != nil && v.Key.GetToken().Value == field {
			return v.Key.GetToken().Position.Line
		}
	}
	return def
}
