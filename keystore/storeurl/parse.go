package storeurl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idem-go/idem/keystore/dynamostore"
	"github.com/idem-go/idem/keystore/redisstore"
)

// ErrInvalid is wrapped by every error of [Parse]: the URL names no store
// this package opens, or names one wrongly.
var ErrInvalid = errors.New("invalid store URL")

// Forms lists the URL forms [Parse] accepts, for error messages and help.
const Forms = "memory, memory:SNAPSHOT-PATH, sqlite:PATH, postgres://…, redis://… (rediss://), redis-cluster://host:port,host:port… (rediss-cluster://), nats://host:port,… or dynamodb://TABLE?region=…"

// Kind is the kind of store a URL names.
type Kind string

// The kinds of store [Parse] recognises.
const (
	Memory   Kind = "memory"   // memory, memory:SNAPSHOT-PATH
	SQLite   Kind = "sqlite"   // sqlite:PATH
	Postgres Kind = "postgres" // postgres://…, postgresql://…
	Redis    Kind = "redis"    // redis://, rediss://, redis-cluster://, rediss-cluster://
	NATS     Kind = "nats"     // nats://…, tls://…
	DynamoDB Kind = "dynamodb" // dynamodb://TABLE?…
)

// Spec is a parsed store URL.
type Spec struct {
	// Kind is the kind of store.
	Kind Kind
	// Path is the snapshot file of memory:PATH ("" for a plain memory
	// store) and the database file of sqlite:PATH; empty otherwise.
	Path string
	// Memory is the bounds of a memory store's query (zero otherwise).
	Memory MemoryOptions
	// URL is the whole URL as given, credentials included (use
	// [Spec.String] in messages).
	URL string
}

// String is the URL with any password hidden, for logs and errors.
func (s Spec) String() string { return Redact(s.URL) }

// Parse accepts memory, memory:PATH (a snapshot file; either with a query
// of bounds, ?max-bytes=64MiB&max-keys=N&capacity=N, see [MemoryOptions]), sqlite:PATH,
// postgres://… (or postgresql://), redis://… (rediss://),
// redis-cluster://… (rediss-cluster://), nats://… (tls://) and
// dynamodb://TABLE?…. The query parameters of the Redis and DynamoDB forms
// are checked here too, so that a bad URL is refused before anything is
// opened; Parse does no I/O. Its errors wrap [ErrInvalid], say what is
// wanted, and never show a password.
func Parse(s string) (Spec, error) {
	spec := Spec{URL: s}
	switch {
	case s == "memory" || strings.HasPrefix(s, "memory?") || strings.HasPrefix(s, "memory:"):
		rest, q, hasQuery := cutQuery(s)
		if hasQuery {
			o, err := parseMemoryQuery(s, q)
			if err != nil {
				return Spec{}, err
			}
			spec.Memory = o
		}
		spec.Kind = Memory
		if rest == "memory" {
			return spec, nil
		}
		p := strings.TrimPrefix(rest, "memory:")
		if p == "" || strings.ContainsRune(p, 0) {
			return Spec{}, fmt.Errorf("%w %q: want memory:PATH, the snapshot file", ErrInvalid, s)
		}
		spec.Path = p
		return spec, nil
	case strings.HasPrefix(s, "sqlite:"):
		p := strings.TrimPrefix(s, "sqlite:")
		if p == "" || strings.ContainsAny(p, "?#\x00") {
			return Spec{}, fmt.Errorf("%w %q: want sqlite:PATH, a file path without ? or #", ErrInvalid, s)
		}
		spec.Kind, spec.Path = SQLite, p
		return spec, nil
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		spec.Kind = Postgres
		return spec, nil
	case strings.HasPrefix(s, "redis://"), strings.HasPrefix(s, "rediss://"),
		strings.HasPrefix(s, "redis-cluster://"), strings.HasPrefix(s, "rediss-cluster://"):
		// OpenURL does no I/O: it only parses and builds the client.
		_, rdb, err := redisstore.OpenURL(s)
		if err != nil {
			return Spec{}, fmt.Errorf("%w %q: %v", ErrInvalid, Redact(s), err)
		}
		rdb.Close()
		spec.Kind = Redis
		return spec, nil
	case strings.HasPrefix(s, "nats://"), strings.HasPrefix(s, "tls://"):
		spec.Kind = NATS
		return spec, nil
	case strings.HasPrefix(s, "dynamodb://"):
		if _, err := dynamostore.ParseURL(s); err != nil {
			return Spec{}, fmt.Errorf("%w %q: %v", ErrInvalid, Redact(s), err)
		}
		spec.Kind = DynamoDB
		return spec, nil
	}
	return Spec{}, fmt.Errorf("%w %q: want %s", ErrInvalid, Redact(s), Forms)
}

// Redact hides the password (the whole user information) of a URL, for
// messages: redis://u:secret@host becomes redis://…@host.
func Redact(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if at := strings.IndexByte(s[i+3:], '@'); at >= 0 {
			return s[:i+3] + "…@" + s[i+3+at+1:]
		}
	}
	return s
}
