package natsstore

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
)

// OpenURL connects to NATS and returns a store on it and the connection it
// made, which the caller closes (the store never does). raw is
//
//	nats://[user:password@]host:port[,host:port…][?bucket=NAME&replicas=N&timeout=DURATION]
//
// (tls:// for TLS): every server of the cluster may be listed, and the
// connection reconnects to any of them forever. bucket, replicas and
// timeout are [WithBucket], [WithReplicas] (default 1: give 3 for a
// replicated store) and [WithTimeout]; they win over opts. Errors wrap
// idem.ErrInvalidOption for a bad URL, and are the server's otherwise
// (OpenURL connects and creates the bucket, under ctx).
func OpenURL(ctx context.Context, raw string, opts ...Option) (*Store, *nats.Conn, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || (scheme != "nats" && scheme != "tls") {
		return nil, nil, fmt.Errorf("natsstore: URL %q: want nats://host:port[,host:port…][?bucket=…&replicas=…]: %w", redact(raw), idem.ErrInvalidOption)
	}
	body, rawQuery, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, nil, fmt.Errorf("natsstore: query of %q: %w: %w", redact(raw), err, idem.ErrInvalidOption)
	}
	for name, vs := range q {
		if len(vs) != 1 {
			return nil, nil, fmt.Errorf("natsstore: %s given %d times: %w", name, len(vs), idem.ErrInvalidOption)
		}
		v := vs[0]
		switch name {
		case "bucket":
			opts = append(opts, WithBucket(v))
		case "replicas":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, nil, fmt.Errorf("natsstore: replicas=%q is not a number: %w", v, idem.ErrInvalidOption)
			}
			opts = append(opts, WithReplicas(n))
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, nil, fmt.Errorf("natsstore: timeout=%q: %w: %w", v, err, idem.ErrInvalidOption)
			}
			opts = append(opts, WithTimeout(d))
		default:
			return nil, nil, fmt.Errorf("natsstore: unknown parameter %q (known: bucket, replicas, timeout): %w", name, idem.ErrInvalidOption)
		}
	}
	if body == "" {
		return nil, nil, fmt.Errorf("natsstore: URL %q has no server: %w", redact(raw), idem.ErrInvalidOption)
	}
	var servers []string
	for _, h := range strings.Split(body, ",") {
		if h == "" || strings.ContainsAny(h, "/#") {
			return nil, nil, fmt.Errorf("natsstore: server %q: want [user:password@]host:port: %w", redact(h), idem.ErrInvalidOption)
		}
		servers = append(servers, scheme+"://"+h)
	}
	nc, err := nats.Connect(strings.Join(servers, ","), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("natsstore: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		var s *Store
		if s, err = New(ctx, js, opts...); err == nil {
			return s, nc, nil
		}
	}
	nc.Close()
	return nil, nil, err
}

// redact hides a password in error messages.
func redact(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		return "…@" + s[at+1:]
	}
	return s
}
