package idemcaddy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/idem-go/idem/idemhttp/idemhttpprom"
	"github.com/idem-go/idem/keystore/storeurl"
	"github.com/prometheus/client_golang/prometheus"
)

// stores holds the open stores by URL. Caddy provisions a new config
// before it cleans up the old one, so a store named by both is never
// closed by a reload: requests in flight under the old config keep their
// keys, and a memory store keeps its contents. A store is closed when the
// last handler naming it is cleaned up.
var stores = caddy.NewUsagePool()

// pooledStore is a store in the pool.
type pooledStore struct{ *storeurl.Opened }

// Destruct implements caddy.Destructor: the last user is gone.
func (p pooledStore) Destruct() error { return p.Close() }

// openTimeout bounds the opening of a store (a NATS server that does not
// answer, DynamoDB's table creation).
const openTimeout = 30 * time.Second

// acquireStore returns the store named by u, opening it if no handler
// holds it yet, and the key to release it with (stores.Delete). The URL is
// parsed by storeurl, as idem serve's --store is, with the same errors.
func acquireStore(ctx caddy.Context, u string) (*storeurl.Opened, string, error) {
	spec, err := storeurl.Parse(u)
	if err != nil {
		return nil, "", fmt.Errorf("idempotency: store: %w", err)
	}
	v, _, err := stores.LoadOrNew(spec.URL, func() (caddy.Destructor, error) {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), openTimeout)
		defer cancel()
		o, err := storeurl.Open(octx, spec, storeurl.Options{MaxResultSize: storeResultLimit, Logger: ctx.Slogger()})
		if err != nil {
			return nil, err
		}
		return pooledStore{o}, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("idempotency: store %s: %w", spec, err)
	}
	return v.(pooledStore).Opened, spec.URL, nil
}

// metricsEntry is the collectors registered on one config's metrics
// registry, shared by that config's handlers: Caddy gives each loaded
// config a registry of its own, and registering twice on one fails.
type metricsEntry struct {
	hooks   *idemhttpprom.Hooks
	release func()
}

var (
	metricsMu  sync.Mutex
	metricsReg = map[*prometheus.Registry]*metricsUse{}
)

type metricsUse struct {
	hooks *idemhttpprom.Hooks
	users int
}

// acquireMetrics registers idemhttpprom's collectors (idem_http_*) on the
// registry of ctx's config, once per config.
func acquireMetrics(ctx caddy.Context) (*metricsEntry, error) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil, errors.New("idempotency: Caddy gave no metrics registry")
	}
	metricsMu.Lock()
	defer metricsMu.Unlock()
	u := metricsReg[reg]
	if u == nil {
		h, err := idemhttpprom.New(reg)
		if err != nil {
			return nil, fmt.Errorf("idempotency: metrics: %w", err)
		}
		u = &metricsUse{hooks: h}
		metricsReg[reg] = u
	}
	u.users++
	once := sync.OnceFunc(func() {
		metricsMu.Lock()
		defer metricsMu.Unlock()
		if u.users--; u.users == 0 {
			delete(metricsReg, reg)
		}
	})
	return &metricsEntry{hooks: u.hooks, release: once}, nil
}
