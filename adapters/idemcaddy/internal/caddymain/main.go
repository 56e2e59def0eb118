// Command caddymain is Caddy with the modules idemcaddy's tests use: the
// HTTP app, the Caddyfile adapter, reverse_proxy, respond, metrics and the
// idempotency handler. The tests build it once per run; `make caddy` builds
// the full distribution with xcaddy instead.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/standard"
	_ "github.com/caddyserver/caddy/v2/modules/metrics"

	_ "github.com/idem-go/idem/adapters/idemcaddy"
)

func main() {
	caddycmd.Main()
}
