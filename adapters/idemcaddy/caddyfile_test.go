package idemcaddy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/idem-go/idem/idemhttp"
)

func parse(t *testing.T, input string) (*Handler, error) {
	t.Helper()
	var h Handler
	toks, err := caddyfile.Tokenize([]byte(input), "Caddyfile")
	if err != nil {
		t.Fatalf("tokenize %q: %v", input, err)
	}
	if err := h.UnmarshalCaddyfile(caddyfile.NewDispenser(toks)); err != nil {
		return nil, err
	}
	return &h, h.Validate()
}

func TestUnmarshalCaddyfile(t *testing.T) {
	t.Parallel()
	h, err := parse(t, `idempotency redis://127.0.0.1:6379/0 {
		key required
		ttl 7d
		lease 45s
		wait 2s
		methods post put
		key_from header X-GitHub-Delivery
		fingerprint fields amount currency
		fingerprint_headers X-Api-Version
		principal {http.auth.user.id}
		store_4xx false
		store_5xx
		max_body 2MiB
		max_response 512KiB
		strict_key
		store_timeout 3s
		handler_timeout 1m
		route payments
	}`)
	if err != nil {
		t.Fatal(err)
	}
	f := false
	tr := true
	want := Handler{
		Store: "redis://127.0.0.1:6379/0", Key: "required", TTL: caddy.Duration(7 * 24 * time.Hour), Lease: caddy.Duration(45 * time.Second),
		Wait: caddy.Duration(2 * time.Second), Methods: []string{"post", "put"}, KeyFrom: &KeyFrom{Header: "X-GitHub-Delivery"},
		Fingerprint: "fields", FingerprintFields: []string{"amount", "currency"}, FingerprintHeaders: []string{"X-Api-Version"},
		Principal: &Principal{Placeholder: "{http.auth.user.id}"}, Store4xx: &f, Store5xx: &tr, MaxBody: 2 << 20, MaxResponse: 512 << 10,
		StrictKey: true, StoreTimeout: caddy.Duration(3 * time.Second), HandlerTimeout: caddy.Duration(time.Minute), Route: "payments",
	}
	if got, w := describe(h), describe(&want); got != w {
		t.Errorf("parsed\n%s\nwant\n%s", got, w)
	}
	if _, err := h.settings(); err != nil {
		t.Errorf("settings: %v", err)
	}
	// The plain form: a memory store, every default.
	if h, err := parse(t, "idempotency"); err != nil || h.Store != "" {
		t.Errorf("plain idempotency: %+v, %v", h, err)
	}
}

func describe(h *Handler) string {
	var b strings.Builder
	for _, kv := range []struct {
		k string
		v any
	}{
		{"store", h.Store}, {"key", h.Key}, {"ttl", h.TTL}, {"lease", h.Lease}, {"wait", h.Wait}, {"methods", h.Methods},
		{"key_from", h.KeyFrom}, {"fingerprint", h.Fingerprint}, {"fields", h.FingerprintFields}, {"fp headers", h.FingerprintHeaders},
		{"principal", h.Principal}, {"4xx", h.Store4xx}, {"5xx", h.Store5xx}, {"max_body", h.MaxBody}, {"max_response", h.MaxResponse},
		{"strict", h.StrictKey}, {"store_timeout", h.StoreTimeout}, {"handler_timeout", h.HandlerTimeout}, {"route", h.Route},
	} {
		switch v := kv.v.(type) {
		case *bool:
			if v != nil {
				kv.v = *v
			}
		case *KeyFrom:
			if v != nil {
				kv.v = *v
			}
		case *Principal:
			if v != nil {
				kv.v = *v
			}
		}
		b.WriteString(kv.k + "=" + strings.TrimSpace(strings.ReplaceAll(fmtAny(kv.v), "\n", " ")) + "\n")
	}
	return b.String()
}

// Bad input is refused with an error that names the subdirective and
// says what to write instead.
func TestUnmarshalCaddyfileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, input string
		want        []string
	}{
		{"unknown subdirective", "idempotency {\n colour blue\n}", []string{`unknown subdirective "colour"`, "store <url>", "Caddyfile:2"}},
		{"hyphenated", "idempotency {\n key-from cloudevents\n}", []string{"did you mean key_from"}},
		{"two stores", "idempotency memory sqlite:/x", []string{`unexpected "sqlite:/x"`}},
		{"bad duration", "idempotency {\n ttl soon\n}", []string{`ttl: "soon" is not a duration`, "30s"}},
		{"duration without value", "idempotency {\n lease\n}", []string{"lease: want one value", "got 0"}},
		{"negative lease", "idempotency {\n lease -1s\n}", []string{"lease: -1s must be positive"}},
		{"zero ttl is omitted, negative refused", "idempotency {\n ttl -2h\n}", []string{"ttl: -2h0m0s must be positive"}},
		{"key", "idempotency {\n key maybe\n}", []string{`key: "maybe": want required or optional`}},
		{"key_from", "idempotency {\n key_from body\n}", []string{`key_from: want header <name>, cloudevents, or json`, `"body"`}},
		{"key_from json bad", "idempotency {\n key_from json a[\n}", []string{"key_from:"}},
		{"fingerprint", "idempotency {\n fingerprint canonical\n}", []string{`fingerprint: "canonical": want raw, json or fields`}},
		{"fingerprint json with fields", "idempotency {\n fingerprint json amount\n}", []string{"fingerprint_fields: contradicts fingerprint json"}},
		{"fingerprint fields none", "idempotency {\n fingerprint fields\n}", []string{"fingerprint_fields:"}},
		{"principal", "idempotency {\n principal user\n}", []string{"principal: want header <name>, cookie <name>, authorization, or a placeholder"}},
		{"principal placeholder", "idempotency {\n principal {http.auth.user.id\n}", []string{"principal:", "placeholder"}},
		{"anonymous with header", "idempotency {\n principal header X-Tenant\n allow_anonymous\n}", []string{"principal: anonymous contradicts header X-Tenant"}},
		{"flag", "idempotency {\n store_5xx yes\n}", []string{"store_5xx: want true, false or nothing"}},
		{"size", "idempotency {\n max_body lots\n}", []string{`max_body: "lots" is not a size`}},
		{"max_response over", "idempotency {\n max_response 64MiB\n}", []string{"max_response:", "above the limit"}},
		{"methods empty", "idempotency {\n methods\n}", []string{"methods: want one or more methods"}},
		{"methods bad", "idempotency {\n methods PO/ST\n}", []string{`methods: "PO/ST" is not a method`}},
		{"fingerprint header", "idempotency {\n fingerprint_headers X:Y\n}", []string{`fingerprint_headers: "X:Y" is not a header name`}},
		{"store timeout", "idempotency {\n store_timeout -1s\n}", []string{"store_timeout: -1s must not be negative"}},
		{"quota odd", "idempotency {\n quota keys\n}", []string{"quota: want name value pairs", "principal_keys 100"}},
		{"quota unknown", "idempotency {\n quota pages 3\n}", []string{`quota: unknown field "pages"`, "principal_keys, principal_bytes, keys, bytes"}},
		{"quota negative", "idempotency {\n quota principal_keys -1\n}", []string{"quota principal_keys: -1 must not be negative"}},
		{"quota unit", "idempotency {\n quota keys 10 bytes 3XB\n}", []string{`quota bytes: "3XB": unknown unit "XB"`}},
		{"quota no keys", "idempotency {\n quota bytes 1GiB\n}", []string{"quota: set principal_keys or keys"}},
	} {
		_, err := parse(t, tc.input)
		if err == nil {
			t.Errorf("%s: %q accepted", tc.name, tc.input)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// A store URL is checked at provisioning with storeurl's rules and words.
func TestProvisionBadStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
	defer cancel()
	h := &Handler{Store: "mysql://db"}
	err := h.Provision(ctx)
	if err == nil || !strings.Contains(err.Error(), "store: invalid store URL") || !strings.Contains(err.Error(), "sqlite:PATH") {
		t.Fatalf("Provision with mysql://: %v", err)
	}
}

// FuzzUnmarshalCaddyfile: any block body parses to an error or to a
// handler whose settings are checked, without panicking.
func FuzzUnmarshalCaddyfile(f *testing.F) {
	for _, s := range []string{
		"store memory", "key required\nttl 7d", "key_from json body.id\nfingerprint json", "principal {http.auth.user.id}\nallow_anonymous",
		"fingerprint fields a b.c\nmax_body 1KiB", "methods POST\nstore_4xx false\nstore_5xx", "principal cookie sid", "wait -1s",
		"quota principal_keys 100 principal_bytes 10MiB keys 10000 bytes 1GiB", "quota keys -1 bytes 9XB",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if len(body) > 2048 {
			return // bounded input: a Caddyfile block is short
		}
		toks, err := caddyfile.Tokenize([]byte("idempotency {\n"+body+"\n}"), "Caddyfile")
		if err != nil {
			return
		}
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewDispenser(toks)); err != nil {
			return
		}
		_ = h.Validate()
	})
}

func fmtAny(v any) string { return fmt.Sprintf("%v", v) }

// The quota subdirective and the JSON's quota object (numbers or sizes)
// reach routeconfig's rules alike.
func TestQuota(t *testing.T) {
	t.Parallel()
	h, err := parse(t, "idempotency {\n quota principal_keys 100 principal_bytes 10MiB keys 10000 bytes 1GiB\n}")
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.settings()
	if err != nil || s.Quota == nil || *s.Quota != (idemhttp.Quota{PrincipalKeys: 100, PrincipalBytes: 10 << 20, Keys: 10000, Bytes: 1 << 30}) {
		t.Fatalf("settings: %+v, %v", s.Quota, err)
	}
	var j Handler
	if err := json.Unmarshal([]byte(`{"quota":{"principal_keys":100,"principal_bytes":"10MiB","keys":10000,"bytes":1073741824}}`), &j); err != nil {
		t.Fatal(err)
	}
	if js, err := j.settings(); err != nil || *js.Quota != *s.Quota {
		t.Fatalf("JSON settings: %+v, %v; want %+v", js.Quota, err, *s.Quota)
	}
	if err := json.Unmarshal([]byte(`{"quota":{"keys":[1]}}`), &j); err == nil || !strings.Contains(err.Error(), "neither a number nor a size") {
		t.Errorf("quota keys [1]: %v", err)
	}
}
