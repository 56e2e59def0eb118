package idemcaddy_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// caddySite opens the end-to-end tests' Caddyfiles: global options for a
// test (the admin API on the socket {{ADMIN}}, no HTTPS, nothing saved,
// the site bound to the socket {{SITE}}) and the site, whose handlers
// follow.
const caddySite = `{
	admin {{ADMIN}}
	auto_https off
	persist_config off
	default_bind {{SITE}}
}

http://127.0.0.1:{{PORT}} {
`

// gateway is the Caddyfile of the end-to-end tests: one idempotency
// handler per route block, each with its own settings, before
// reverse_proxy. {{VERSION}} tells a reload's config from the first.
const gateway = caddySite + `	handle /healthz {
		respond "ok {{VERSION}}"
	}
	handle /slow/* {
		idempotency {
			store memory
			lease 2s
			route slow
		}
		reverse_proxy {{UP}}
	}
	handle /down/* {
		idempotency redis://127.0.0.1:{{DEAD}}/0 {
			store_timeout 2s
			route down
		}
		reverse_proxy {{UP}}
	}
	handle /gone/* {
		idempotency
		reverse_proxy 127.0.0.1:{{DEAD}}
	}
	handle {
		idempotency {
			store memory
		}
		reverse_proxy {{UP}}
	}
}
`

// TestCaddy runs a real Caddy process from a Caddyfile, with the module,
// in front of an upstream that counts its calls.
func TestCaddy(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startCaddy(t, gateway, map[string]string{"UP": up.addr(), "DEAD": strconv.Itoa(deadPort(t)), "VERSION": "1"})

	t.Run("replay", func(t *testing.T) {
		first := p.post(t, "/orders", "replay-1", "Bearer alice", `{"amount":5}`)
		if first.status != http.StatusCreated || first.replayed {
			t.Fatalf("first: %+v", first)
		}
		again := p.post(t, "/orders", "replay-1", "Bearer alice", `{"amount":5}`)
		if again.status != http.StatusCreated || !again.replayed || again.body != first.body {
			t.Fatalf("retry: %+v, want the first response replayed: %+v", again, first)
		}
		if n := up.count("replay-1"); n != 1 {
			t.Fatalf("upstream called %d times", n)
		}
	})

	t.Run("mismatch", func(t *testing.T) {
		if r := p.post(t, "/orders", "mismatch-1", "Bearer alice", `{"amount":5}`); r.status != http.StatusCreated {
			t.Fatalf("first: %+v", r)
		}
		r := p.post(t, "/orders", "mismatch-1", "Bearer alice", `{"amount":6}`)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.header.Get("Content-Type"), "problem+json") {
			t.Fatalf("same key, another body: %+v, want 422 problem", r)
		}
		if n := up.count("mismatch-1"); n != 1 {
			t.Fatalf("upstream called %d times", n)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		first, release := p.postHeld(t, up, "/orders", "conc-1")
		var wg sync.WaitGroup
		others := make([]response, 4)
		for i := range others {
			wg.Go(func() { others[i] = p.post(t, "/orders", "conc-1", "Bearer alice", `{}`) })
		}
		wg.Wait()
		for i, r := range others {
			if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
				t.Errorf("concurrent request %d: %+v, want 409 with Retry-After", i, r)
			}
		}
		release()
		if r := <-first; r.status != http.StatusCreated {
			t.Fatalf("first: %+v", r)
		}
		if n := up.count("conc-1"); n != 1 {
			t.Fatalf("upstream called %d times, want once", n)
		}
	})

	t.Run("principals", func(t *testing.T) {
		a := p.post(t, "/orders", "shared-key", "Bearer alice", `{"amount":1}`)
		b := p.post(t, "/orders", "shared-key", "Bearer bob", `{"amount":1}`)
		if a.status != http.StatusCreated || b.status != http.StatusCreated || a.replayed || b.replayed {
			t.Fatalf("alice %+v, bob %+v: want both executed", a, b)
		}
		if n := up.count("shared-key"); n != 2 {
			t.Fatalf("upstream called %d times, want once per principal", n)
		}
		for _, c := range []struct {
			auth string
			want response
		}{{"Bearer alice", a}, {"Bearer bob", b}} {
			r := p.post(t, "/orders", "shared-key", c.auth, `{"amount":1}`)
			if !r.replayed || r.body != c.want.body {
				t.Errorf("%s's retry: %+v, want its own response %q", c.auth, r, c.want.body)
			}
		}
		if r := p.post(t, "/orders", "anon-key", "", `{}`); r.status != http.StatusBadRequest {
			t.Errorf("no principal: %+v, want 400", r)
		}
	})

	t.Run("slow upstream", func(t *testing.T) {
		// The upstream takes more than twice the 2s lease: the lease is
		// renewed while it works, so a retry meanwhile is 409, never a
		// second execution.
		first, release := p.postHeld(t, up, "/slow/orders", "slow-1")
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			if r := p.post(t, "/slow/orders", "slow-1", "Bearer alice", `{}`); r.status != http.StatusConflict {
				t.Fatalf("retry while the upstream works: %+v, want 409", r)
			}
		}
		release()
		if r := <-first; r.status != http.StatusCreated {
			t.Fatalf("slow request: %+v", r)
		}
		if r := p.post(t, "/slow/orders", "slow-1", "Bearer alice", `{}`); !r.replayed {
			t.Fatalf("retry after: %+v, want a replay", r)
		}
		if n := up.count("slow-1"); n != 1 {
			t.Fatalf("upstream called %d times", n)
		}
	})

	t.Run("store down", func(t *testing.T) {
		r := p.post(t, "/down/orders", "down-1", "Bearer alice", `{}`)
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("store down: %+v, want 503", r)
		}
		if n := up.count("down-1"); n != 0 {
			t.Fatalf("upstream called %d times with the store down", n)
		}
	})

	t.Run("upstream down", func(t *testing.T) {
		// reverse_proxy returns an error (502): the key is released, so
		// a retry executes again rather than 409 or a replayed 502.
		for i := range 2 {
			if r := p.post(t, "/gone/orders", "gone-1", "Bearer alice", `{}`); r.status != http.StatusBadGateway || r.replayed {
				t.Fatalf("attempt %d with the upstream down: %+v, want 502 from Caddy", i, r)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		res, err := p.client.Get(p.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		for _, want := range []string{
			`idem_http_requests_total{outcome="replayed",route="default"}`,
			`idem_http_requests_total{outcome="store_error",route="down"}`,
			`idem_http_requests_total{outcome="executed",route="slow"} 1`,
			`idem_http_requests_total{outcome="released",route="default"} 2`,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// TestCaddyReload reloads the config with a key in flight: the request
// completes under the old config, its key stays held meanwhile (the
// memory store is the same one), and its response is replayed under the
// new config.
func TestCaddyReload(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startCaddy(t, gateway, map[string]string{"UP": up.addr(), "DEAD": strconv.Itoa(deadPort(t)), "VERSION": "1"})
	if r := p.post(t, "/orders", "before", "Bearer alice", `{}`); r.status != http.StatusCreated {
		t.Fatalf("before the reload: %+v", r)
	}
	first, release := p.postHeld(t, up, "/orders", "inflight")

	p.vars["VERSION"] = "2"
	path := p.write(t, gateway)
	loaded := make(chan error, 1)
	go func() {
		out, err := runCaddy(t, "reload", "--config", path, "--adapter", "caddyfile", "--address", p.adminSock)
		if err != nil {
			err = &reloadError{err, out}
		}
		loaded <- err
	}()
	waitFor(t, "the new config serves (ok 2)", func() bool {
		res, err := p.client.Get(p.base + "/healthz")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b) == "ok 2"
	})
	if r := p.post(t, "/orders", "inflight", "Bearer alice", `{}`); r.status != http.StatusConflict {
		t.Fatalf("retry under the new config while the first runs: %+v, want 409", r)
	}
	if r := p.post(t, "/orders", "before", "Bearer alice", `{}`); !r.replayed {
		t.Fatalf("a key completed before the reload: %+v, want a replay (the memory store survives)", r)
	}
	release()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("the request in flight during the reload: %+v", r)
	}
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(within):
		t.Fatal("caddy reload did not return")
	}
	if r := p.post(t, "/orders", "inflight", "Bearer alice", `{}`); !r.replayed || r.status != http.StatusCreated {
		t.Fatalf("retry after the reload: %+v, want the in-flight request's response replayed", r)
	}
	if n := up.count("inflight"); n != 1 {
		t.Fatalf("upstream called %d times", n)
	}
}
