package idemcaddy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/idem-go/idem/adapters/idemcaddy"
)

var caddyfileBlock = regexp.MustCompile("(?s)<!-- checked by adapters/idemcaddy TestDocsCaddyfile[^\n]*\n```caddyfile\n(.*?)```")

// TestDocsCaddyfile adapts docs/caddy.md's Caddyfile with Caddy's own
// adapter: it parses, every idempotency handler lands before its
// reverse_proxy, and each one's settings are valid.
func TestDocsCaddyfile(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := caddyfileBlock.FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/caddy.md: no ```caddyfile block after the 'checked by' comment")
	}
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(m[1], nil)
	if err != nil {
		t.Fatalf("docs/caddy.md's Caddyfile: %v", err)
	}
	for _, w := range warnings {
		t.Errorf("warning: %s", w)
	}
	js := string(out)
	if n := strings.Count(js, `"handler":"idempotency"`); n != 3 {
		t.Errorf("%d idempotency handlers in the adapted config, want 3:\n%s", n, js)
	}
	var handlers []idemcaddy.Handler
	collect(t, js, &handlers)
	if len(handlers) != 3 {
		t.Fatalf("decoded %d handlers", len(handlers))
	}
	for _, h := range handlers {
		if err := h.Validate(); err != nil {
			t.Errorf("%+v: %v", h, err)
		}
	}
	// The directive orders itself before reverse_proxy in each route.
	for _, seg := range strings.Split(js, `"handler":"idempotency"`)[1:] {
		if !strings.Contains(seg, `"handler":"reverse_proxy"`) {
			t.Errorf("an idempotency handler with no reverse_proxy after it:\n%s", js)
		}
	}
}

// collect decodes every JSON object whose "handler" is "idempotency".
func collect(t *testing.T, js string, into *[]idemcaddy.Handler) {
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "idempotency" {
				b, _ := json.Marshal(v)
				var h idemcaddy.Handler
				if err := json.Unmarshal(b, &h); err != nil {
					t.Fatal(err)
				}
				*into = append(*into, h)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var v any
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	walk(v)
}
