package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/pflag"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
)

// httpKeyFlags name an HTTP key of idem serve by the client's request: its
// Idempotency-Key header, the headers that carry its principal, and the
// policy that scoped it (idem serve's flags, or a route of its --config
// file).
type httpKeyFlags struct {
	key, scopeHeader, scopeCookie string
	headers                       []string
	anonymous, strict             bool
	config, route                 string
}

func addHTTPKeyFlags(fl *pflag.FlagSet, h *httpKeyFlags) {
	fl.StringVar(&h.key, "idempotency-key", "", `the client's Idempotency-Key header value, raw as sent ("order-1" with its quotes, or order-1), instead of KEY`)
	fl.StringArrayVarP(&h.headers, "header", "H", nil, "a header of the client's request, 'Name: value' (repeatable): the one its principal is taken from")
	fl.StringVar(&h.config, "config", "", "the --config file idem serve runs with: the route's scope is used")
	fl.StringVar(&h.route, "route", "", `with --config: the route, by its pattern ("POST /v1/charges") or by the client's request ("POST /v1/charges/ch_1"), matched as idem serve matches (default: the flags' policy, for requests no route matches)`)
	fl.StringVar(&h.scopeHeader, "scope-header", "", "the --scope-header idem serve runs with")
	fl.StringVar(&h.scopeCookie, "scope-cookie", "", "the --scope-cookie idem serve runs with")
	fl.BoolVar(&h.anonymous, "allow-anonymous", false, "idem serve runs with --allow-anonymous")
	fl.BoolVar(&h.strict, "strict-key", false, "idem serve runs with --strict-key")
}

// keyPolicy is the policy a key is derived under, and where it comes from,
// for errors.
type keyPolicy struct {
	policy
	from string // "the flags' policy", or `route "POST /v1/charges" (gateway.yaml:10)`
}

// storeKey is args[0], or the store key of the request the flags describe,
// derived as idem serve derives it: the key parsed as the gateway parses
// the header (RFC 8941 sf-string or token), scoped as the route says.
func (h *httpKeyFlags) storeKey(args []string) (string, error) {
	switch {
	case len(args) == 1 && h.key == "":
		if h.route != "" || h.config != "" || len(h.headers) > 0 {
			return "", errors.New("--config, --route and --header describe a client's request: give --idempotency-key with them, not KEY")
		}
		return args[0], nil
	case len(args) == 1 || h.key == "":
		return "", errors.New("give either KEY (the store key, from 'idem keys list') or --idempotency-key (the client's header)")
	}
	p, err := h.policy()
	if err != nil {
		return "", err
	}
	if p.passThrough {
		return "", fmt.Errorf("%s is pass-through: its requests use no key", p.from)
	}
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set(idemhttp.HeaderKey, h.key)
	for _, hv := range h.headers {
		name, value, ok := strings.Cut(hv, ":")
		if !ok {
			return "", fmt.Errorf("--header %q: want 'Name: value'", hv)
		}
		r.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	opts := []idemhttp.Option{idemhttp.WithAllowAnonymous(p.anonymous), idemhttp.WithStrictKey(h.strict)}
	if p.scopeHeader != "" {
		opts = append(opts, idemhttp.WithScopeHeader(p.scopeHeader))
	}
	if p.scopeCookie != "" {
		opts = append(opts, idemhttp.WithScopeCookie(p.scopeCookie))
	}
	ms, err := memstore.New() // no store I/O: only the key is derived
	if err != nil {
		return "", err
	}
	defer ms.Close()
	m, err := idemhttp.New(ms, opts...)
	if err != nil {
		return "", err
	}
	key, err := m.StoreKey(r)
	switch {
	case errors.Is(err, idem.ErrInvalidKey) || errors.Is(err, idem.ErrMissingKey):
		return "", fmt.Errorf("--idempotency-key %q: %w (idem serve answers such a request 400)", h.key, err)
	case err != nil:
		// No principal, or not the one the scope wants.
		return "", fmt.Errorf("the request carries no principal the gateway accepts: %w; %s", err, h.principalHint(p))
	}
	return key, nil
}

// principalHint says which flag names the principal of a request under p.
func (h *httpKeyFlags) principalHint(p keyPolicy) string {
	var hint string
	switch {
	case p.scopeHeader != "":
		hint = fmt.Sprintf("%s takes the principal from the %s header: pass -H '%s: <the value the client sent>'", p.from, p.scopeHeader, p.scopeHeader)
	case p.scopeCookie != "":
		hint = fmt.Sprintf("%s takes the principal from the %s cookie, else from Authorization: pass -H 'Cookie: %s=<the client's cookie>' or -H 'Authorization: <the client's header>'", p.from, p.scopeCookie, p.scopeCookie)
	default:
		hint = fmt.Sprintf("%s takes the principal from the Authorization header: pass -H 'Authorization: <the client's header, e.g. Bearer …>'", p.from)
	}
	if h.config == "" {
		hint += "; if idem serve runs with --config, pass it and the request's route (--config FILE --route 'POST /path'), whose scope may differ"
	}
	return hint
}

// policy is the policy the flags describe: idem serve's flags, overridden
// by the --route of the --config file if given.
func (h *httpKeyFlags) policy() (keyPolicy, error) {
	if h.scopeHeader != "" && h.scopeCookie != "" {
		return keyPolicy{}, errors.New("--scope-header and --scope-cookie: choose one")
	}
	base := keyPolicy{policy: policy{scopeHeader: h.scopeHeader, scopeCookie: h.scopeCookie, anonymous: h.anonymous}, from: "the flags' policy (no --config route)"}
	if h.config == "" {
		if h.route != "" {
			return keyPolicy{}, errors.New("--route needs --config, the file whose routes it names")
		}
		return base, nil
	}
	routes, err := readConfig(h.config)
	if err != nil {
		return keyPolicy{}, err
	}
	if h.route == "" {
		base.from = fmt.Sprintf("the flags' policy (no --route; requests no route of %s matches)", h.config)
		return base, nil
	}
	r, ok, err := matchRoute(routes, h.route)
	if err != nil {
		return keyPolicy{}, err
	}
	if !ok {
		base.from = fmt.Sprintf("the flags' policy (no route of %s matches %q)", h.config, h.route)
		return base, nil
	}
	return keyPolicy{policy: base.policy.with(r), from: fmt.Sprintf("route %q (%s:%d)", r.pattern, h.config, r.line)}, nil
}

// matchRoute is the route of routes named by sel: its pattern, or else
// the route idem serve would choose for a request "METHOD /path" (POST if
// sel is only a path). ok is false when no route matches: the flags'
// policy applies.
func matchRoute(routes []route, sel string) (r route, ok bool, err error) {
	sel = strings.Join(strings.Fields(sel), " ")
	for _, r := range routes {
		if r.pattern == sel {
			return r, true, nil
		}
	}
	method, path := http.MethodPost, sel
	if m, p, found := strings.Cut(sel, " "); found {
		method, path = m, p
	}
	req, err := http.NewRequest(method, path, nil)
	if err != nil || !strings.HasPrefix(path, "/") {
		return route{}, false, fmt.Errorf("--route %q: want a pattern of the file (\"POST /v1/charges\") or a request (\"POST /v1/charges/ch_1\")", sel)
	}
	req.Host = "localhost"
	mux := http.NewServeMux()
	byPattern := map[string]int{}
	for i, r := range routes {
		if register(mux, r.pattern, &routeEntry{indexHandler(i)}) == nil {
			byPattern[r.pattern] = i
		}
	}
	// As policySet.handler: a request ServeMux would redirect gets the
	// policy of the pattern the redirect reaches.
	h, pattern := mux.Handler(req)
	if e, isRoute := h.(*routeEntry); isRoute {
		return routes[int(e.h.(indexHandler))], true, nil
	}
	if i, isRoute := byPattern[pattern]; isRoute {
		return routes[i], true, nil
	}
	return route{}, false, nil
}

// indexHandler marks a route's index in matchRoute's mux; it never serves.
type indexHandler int

func (indexHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}
