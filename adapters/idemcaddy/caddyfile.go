package idemcaddy

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
	"github.com/idem-go/idem/internal/frontend/routeconfig"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("idempotency", parseCaddyfile)
	// Keys are claimed before the request is proxied: a plain
	// `idempotency { store memory }` beside reverse_proxy needs no order.
	httpcaddyfile.RegisterDirectiveOrder("idempotency", httpcaddyfile.Before, "reverse_proxy")
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m Handler
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// subdirectives lists the Caddyfile's subdirectives with their syntax,
// for the error that answers an unknown one.
var subdirectives = []string{
	"store <url>", "key required|optional", "ttl <duration>", "lease <duration>", "wait <duration>",
	"methods <method...>", "key_from header <name>|cloudevents|json <expr>", "fingerprint raw|json|fields <expr...>",
	"fingerprint_headers <header...>", "principal header <name>|cookie <name>|authorization|{placeholder}",
	"allow_anonymous", "store_4xx [true|false]", "store_5xx [true|false]", "max_body <size>", "max_response <size>",
	"quota principal_keys <n> principal_bytes <size> keys <n> bytes <size>", "strict_key", "store_timeout <duration>", "handler_timeout <duration>", "route <name>",
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	idempotency [<matcher>] [<store>] {
//		store <url>
//		key required|optional
//		ttl <duration>
//		lease <duration>
//		wait <duration>
//		methods <method...>
//		key_from header <name> | cloudevents | json <expr>
//		fingerprint raw | json | fields <expr...>
//		fingerprint_headers <header...>
//		principal header <name> | cookie <name> | authorization | {placeholder}
//		allow_anonymous
//		store_4xx [true|false]
//		store_5xx [true|false]
//		max_body <size>
//		max_response <size>
//		quota [principal_keys <n>] [principal_bytes <size>] [keys <n>] [bytes <size>]
//		strict_key
//		store_timeout <duration>
//		handler_timeout <duration>
//		route <name>
//	}
//
// Values are checked by Validate, with the rules of idem serve's --config.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		h.Store = d.Val()
	}
	if d.NextArg() {
		return d.Errf("idempotency: unexpected %q after the store (want: idempotency [<matcher>] [<store>] { … })", d.Val())
	}
	for d.NextBlock(0) {
		sub := d.Val()
		args := d.RemainingArgs()
		one := func(what string) (string, error) {
			if len(args) != 1 {
				return "", d.Errf("idempotency: %s: want one value, %s; got %d", sub, what, len(args))
			}
			return args[0], nil
		}
		some := func(what string) ([]string, error) {
			if len(args) == 0 {
				return nil, d.Errf("idempotency: %s: want %s", sub, what)
			}
			return args, nil
		}
		duration := func(to *caddy.Duration) error {
			v, err := one("a duration such as 30s, 24h or 7d")
			if err != nil {
				return err
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil {
				return d.Errf("idempotency: %s: %q is not a duration (want 30s, 24h or 7d)", sub, v)
			}
			*to = caddy.Duration(dur)
			return nil
		}
		flag := func() (bool, error) {
			switch {
			case len(args) == 0:
				return true, nil
			case len(args) == 1 && (args[0] == "true" || args[0] == "false"):
				return args[0] == "true", nil
			}
			return false, d.Errf("idempotency: %s: want true, false or nothing (true); got %q", sub, strings.Join(args, " "))
		}
		size := func(what string) (int64, error) {
			v, err := one(what)
			if err != nil {
				return 0, err
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n == 0 || n > 1<<40 {
				return 0, d.Errf("idempotency: %s: %q is not a size (want bytes, such as 8MiB or 1048576)", sub, v)
			}
			return int64(n), nil
		}
		var err error
		switch sub {
		case "store":
			h.Store, err = one("the store URL (memory, sqlite:PATH, postgres://…, redis://…, nats://…, dynamodb://…)")
		case "key":
			h.Key, err = one("required or optional")
		case "ttl":
			err = duration(&h.TTL)
		case "lease":
			err = duration(&h.Lease)
		case "wait":
			err = duration(&h.Wait)
		case "store_timeout":
			err = duration(&h.StoreTimeout)
		case "handler_timeout":
			err = duration(&h.HandlerTimeout)
		case "methods":
			h.Methods, err = some("one or more methods, such as POST PATCH")
		case "key_from":
			h.KeyFrom, err = keyFrom(d, args)
		case "fingerprint":
			var fp []string
			if fp, err = some("raw, json, or fields followed by JMESPath expressions"); err == nil {
				h.Fingerprint, h.FingerprintFields = fp[0], nil
				if len(fp) > 1 {
					h.FingerprintFields = fp[1:]
				}
			}
		case "fingerprint_headers":
			h.FingerprintHeaders, err = some("one or more header names")
		case "principal":
			h.Principal, err = principal(d, args)
		case "allow_anonymous":
			h.AllowAnonymous, err = flag()
		case "store_4xx", "store_5xx":
			var v bool
			if v, err = flag(); err == nil {
				if sub == "store_4xx" {
					h.Store4xx = &v
				} else {
					h.Store5xx = &v
				}
			}
		case "strict_key":
			h.StrictKey, err = flag()
		case "max_body":
			h.MaxBody, err = size("the largest keyed request body, such as 8MiB")
		case "max_response":
			var n int64
			if n, err = size("the largest stored response, such as 1MiB"); err == nil {
				h.MaxResponse = int(min(n, 1<<40))
			}
		case "quota":
			q, qerr := routeconfig.ParseQuotaWords(args, "_")
			if qerr != nil {
				return d.Errf("idempotency: quota: %v", qerr)
			}
			h.Quota = &Quota{QuotaValue(q.PrincipalKeys), QuotaValue(q.PrincipalBytes), QuotaValue(q.Keys), QuotaValue(q.Bytes)}
		case "route":
			h.Route, err = one("the route's name in the metrics")
		default:
			hint := ""
			if u := strings.ReplaceAll(sub, "-", "_"); u != sub && isSubdirective(u) {
				hint = " (did you mean " + u + "? the Caddyfile writes them with underscores)"
			}
			return d.Errf("idempotency: unknown subdirective %q%s; want one of: %s", sub, hint, strings.Join(subdirectives, "; "))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func isSubdirective(s string) bool {
	for _, sd := range subdirectives {
		if strings.HasPrefix(sd, s+" ") || sd == s {
			return true
		}
	}
	return false
}

func keyFrom(d *caddyfile.Dispenser, args []string) (*KeyFrom, error) {
	switch {
	case len(args) == 2 && args[0] == "header":
		return &KeyFrom{Header: args[1]}, nil
	case len(args) == 1 && args[0] == "cloudevents":
		return &KeyFrom{CloudEvents: true}, nil
	case len(args) == 2 && args[0] == "json":
		return &KeyFrom{JSON: args[1]}, nil
	}
	return nil, d.Errf("idempotency: key_from: want header <name>, cloudevents, or json <JMESPath expression>; got %s", quoteArgs(args))
}

func principal(d *caddyfile.Dispenser, args []string) (*Principal, error) {
	switch {
	case len(args) == 2 && args[0] == "header":
		return &Principal{Header: args[1]}, nil
	case len(args) == 2 && args[0] == "cookie":
		return &Principal{Cookie: args[1]}, nil
	case len(args) == 1 && args[0] == "authorization":
		return &Principal{Authorization: true}, nil
	case len(args) == 1 && strings.HasPrefix(args[0], "{"):
		return &Principal{Placeholder: args[0]}, nil
	}
	return nil, d.Errf("idempotency: principal: want header <name>, cookie <name>, authorization, or a placeholder such as {http.auth.user.id}; got %s", quoteArgs(args))
}

func quoteArgs(args []string) string {
	if len(args) == 0 {
		return "nothing"
	}
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, " ")
}
