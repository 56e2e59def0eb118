package redisstore

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
)

// Client settings that bound a Cluster failover's outage. A master's
// failure is noticed by the other nodes after cluster-node-timeout and a
// replica is promoted a second or two later; go-redis, by default, learns
// of it only from a MOVED reply or its 60 s reload of the slot map, and
// went on sending a dead master's slots to it for 52 s (6-node Redis 7.0
// Cluster, loopback). Reloading every second and giving up on a dead node
// quickly took the outage to 6.9 s with cluster-node-timeout 5000
// (docs/scale.md has the measurements).
const (
	// ClusterStateReload is how often ClusterOptions reloads the slot map.
	ClusterStateReload = time.Second
	// ClusterDialTimeout bounds a connection attempt to a node that may be
	// gone.
	ClusterDialTimeout = time.Second
	// ClusterIOTimeout bounds one read or write; WithWaitReplicas timeouts
	// must be shorter.
	ClusterIOTimeout = 2 * time.Second
)

// ClusterOptions returns go-redis Cluster options for a store on addrs
// (host:port of any of the cluster's nodes) that keep a failover's outage
// under 10 s when the servers run with cluster-node-timeout 5000 or less:
// the slot map is reloaded every [ClusterStateReload], dials and I/O give
// up on a dead master within [ClusterDialTimeout] and [ClusterIOTimeout],
// and a command is retried (with backoff, up to 8 ms … 512 ms) up to 5
// times, so that a call in flight during a promotion finds the new master.
// Retrying a script is safe: Reserve recognises its own lease by its nonce
// and Complete treats its own earlier completion as success. Change
// fields of the result as needed before redis.NewClusterClient.
func ClusterOptions(addrs []string) *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                      addrs,
		ClusterStateReloadInterval: ClusterStateReload,
		DialTimeout:                ClusterDialTimeout,
		ReadTimeout:                ClusterIOTimeout,
		WriteTimeout:               ClusterIOTimeout,
		MaxRetries:                 5,
		MaxRedirects:               8,
		PoolSize:                   64,
	}
}

// DefaultClusterBuckets is the bucket count [OpenURL] uses for a
// redis-cluster:// URL without buckets=: enough for a scope to spread over
// the masters of a cluster.
const DefaultClusterBuckets = 64

// OpenURL connects to Redis and returns a store on it and the client it
// made, which the caller closes (the store never does). raw is one of:
//
//	redis://[user:password@]host:port[/db][?…]      one node (go-redis ParseURL, its query options)
//	rediss://…                                       the same over TLS
//	redis-cluster://[user:password@]host:port,host:port[?…]   a Cluster, with ClusterOptions
//	rediss-cluster://…                               the same over TLS
//
// and the query may also hold the store's own settings, which win over
// opts: buckets=N ([WithBuckets]; default 1 for redis://, and
// [DefaultClusterBuckets] for redis-cluster://, a layout new with this
// scheme), wait_replicas=N and wait_timeout=DURATION ([WithWaitReplicas]),
// prefix=P ([WithPrefix]). A redis-cluster:// URL takes no other
// parameters. Errors wrap idem.ErrInvalidOption; OpenURL does no I/O, so
// an unreachable Redis is found by the first call (or a Ping).
func OpenURL(raw string, opts ...Option) (*Store, redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, nil, fmt.Errorf("redisstore: URL %q has no scheme: %w", redact(raw), idem.ErrInvalidOption)
	}
	body, rawQuery, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: query of %q: %w: %w", redact(raw), err, idem.ErrInvalidOption)
	}
	var own []Option
	cluster := scheme == "redis-cluster" || scheme == "rediss-cluster"
	if cluster {
		own = append(own, WithBuckets(DefaultClusterBuckets))
	}
	waitN, waitT := -1, time.Duration(0)
	for _, name := range []string{"buckets", "wait_replicas", "wait_timeout", "prefix"} {
		vs, has := q[name]
		if !has {
			continue
		}
		q.Del(name)
		if len(vs) != 1 {
			return nil, nil, fmt.Errorf("redisstore: %s given %d times: %w", name, len(vs), idem.ErrInvalidOption)
		}
		v := vs[0]
		switch name {
		case "buckets", "wait_replicas":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, nil, fmt.Errorf("redisstore: %s=%q is not a number: %w", name, v, idem.ErrInvalidOption)
			}
			if name == "buckets" {
				own = append(own, WithBuckets(n))
			} else {
				waitN = n
			}
		case "wait_timeout":
			if waitT, err = time.ParseDuration(v); err != nil {
				return nil, nil, fmt.Errorf("redisstore: wait_timeout=%q: %w: %w", v, err, idem.ErrInvalidOption)
			}
		case "prefix":
			own = append(own, WithPrefix(v))
		}
	}
	if waitN >= 0 || waitT != 0 {
		if waitT == 0 {
			waitT = time.Second
		}
		own = append(own, WithWaitReplicas(max(waitN, 1), waitT))
	}
	var rdb redis.UniversalClient
	switch scheme {
	case "redis", "rediss":
		u := scheme + "://" + body
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: %q: %w: %w", redact(raw), err, idem.ErrInvalidOption)
		}
		rdb = redis.NewClient(o)
	case "redis-cluster", "rediss-cluster":
		if len(q) > 0 {
			return nil, nil, fmt.Errorf("redisstore: unknown parameters %q in a cluster URL (known: buckets, wait_replicas, wait_timeout, prefix): %w", q.Encode(), idem.ErrInvalidOption)
		}
		o, err := parseClusterBody(body)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: %q: %w: %w", redact(raw), err, idem.ErrInvalidOption)
		}
		if scheme == "rediss-cluster" {
			o.TLSConfig = tlsConfig(o.Addrs[0])
		}
		rdb = redis.NewClusterClient(o)
	default:
		return nil, nil, fmt.Errorf("redisstore: scheme %q: want redis, rediss, redis-cluster or rediss-cluster: %w", scheme, idem.ErrInvalidOption)
	}
	s, err := New(rdb, append(opts, own...)...)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return s, rdb, nil
}

// parseClusterBody parses [user:password@]host:port,host:port into
// ClusterOptions.
func parseClusterBody(body string) (*redis.ClusterOptions, error) {
	var user, pass string
	if at := strings.LastIndexByte(body, '@'); at >= 0 {
		info := body[:at]
		body = body[at+1:]
		u, p, hasPass := strings.Cut(info, ":")
		var err error
		if user, err = url.PathUnescape(u); err != nil {
			return nil, err
		}
		if hasPass {
			if pass, err = url.PathUnescape(p); err != nil {
				return nil, err
			}
		}
	}
	body = strings.TrimSuffix(body, "/")
	if body == "" {
		return nil, fmt.Errorf("no addresses")
	}
	var addrs []string
	for _, a := range strings.Split(body, ",") {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return nil, fmt.Errorf("address %q: want host:port", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("address %q: bad port", a)
		}
		addrs = append(addrs, a)
	}
	o := ClusterOptions(addrs)
	o.Username, o.Password = user, pass
	return o, nil
}

// redact hides a password in error messages.
func redact(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if at := strings.LastIndexByte(s[i+3:], '@'); at >= 0 {
			return s[:i+3] + "…@" + s[i+3+at+1:]
		}
	}
	return s
}

// tlsConfig verifies the server's certificate against addr's host name.
func tlsConfig(addr string) *tls.Config {
	host, _, _ := net.SplitHostPort(addr)
	return &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
}
