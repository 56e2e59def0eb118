package idemhttp

import (
	"net/http"
	"strings"
	"time"
)

// DefaultRoute is the route reported to [RouteHooks] for a request whose
// route is not known: no [WithRoute], and no http.ServeMux pattern routed
// it before the middleware.
const DefaultRoute = "default"

// WithRoute names the route the Middleware or Proxy serves, for metrics
// ([RouteHooks], idemhttpprom's route label) and spans (idem.route). Use a
// name or pattern from your configuration ("POST /v1/orders",
// "payments"), never a raw path, so that the number of series stays
// bounded. Without it, the route is the http.ServeMux pattern that
// routed the request before it reached the middleware
// (mux.Handle("POST /v1/orders", m.Handler(h))), else [DefaultRoute].
func WithRoute(name string) Option {
	return func(c *config) error {
		if strings.TrimSpace(name) == "" {
			return invalid("empty route name")
		}
		c.route = name
		return nil
	}
}

// RouteHooks is implemented by [Hooks] that also want the route of each
// request: the Middleware then calls RequestRoute instead of Request.
// route is [WithRoute]'s name, else the http.ServeMux pattern that routed
// the request, else [DefaultRoute]: a bounded set, never a raw path.
type RouteHooks interface {
	Hooks
	RequestRoute(route string, o Outcome, d time.Duration)
}

// namedRoute is r's route if one is known: WithRoute's, or the ServeMux
// pattern that routed r.
func (m *Middleware) namedRoute(r *http.Request) string {
	if m.cfg.route != "" {
		return m.cfg.route
	}
	return r.Pattern
}

// report passes r's outcome to the hooks, with its route if they take one.
func (m *Middleware) report(r *http.Request, o Outcome, d time.Duration) {
	rh, ok := m.cfg.hooks.(RouteHooks)
	if !ok {
		m.cfg.hooks.Request(o, d)
		return
	}
	route := m.namedRoute(r)
	if route == "" {
		route = DefaultRoute
	}
	rh.RequestRoute(route, o, d)
}
