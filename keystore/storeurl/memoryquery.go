package storeurl

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/idem-go/idem/internal/frontend/routeconfig"
	"github.com/idem-go/idem/keystore/memstore"
)

// MemoryOptions are the bounds a memory store URL sets in its query:
// memory?max-bytes=64MiB&max-keys=100000&capacity=100000 (and the same
// after memory:SNAPSHOT-PATH). Zero fields take memstore's defaults.
type MemoryOptions struct {
	// MaxBytes bounds the bytes of stored results the store holds
	// (memstore.WithMaxBytes; a size such as 64MiB or 1GB): past it a
	// result is not stored (idemhttp answers its retries 410) rather than
	// the process growing.
	MaxBytes int64
	// MaxKeys bounds the keys the store holds (memstore.WithMaxKeys).
	MaxKeys int
	// Capacity sizes the store's indexes from the start
	// (memstore.WithCapacity).
	Capacity int
}

// options are o as memstore options.
func (o MemoryOptions) options() []memstore.Option {
	var opts []memstore.Option
	if o.MaxBytes > 0 {
		opts = append(opts, memstore.WithMaxBytes(o.MaxBytes))
	}
	if o.MaxKeys > 0 {
		opts = append(opts, memstore.WithMaxKeys(o.MaxKeys))
	}
	if o.Capacity > 0 {
		opts = append(opts, memstore.WithCapacity(o.Capacity))
	}
	return opts
}

// parseMemoryQuery reads a memory URL's query (after its '?').
func parseMemoryQuery(s, q string) (MemoryOptions, error) {
	var o MemoryOptions
	vals, err := url.ParseQuery(q)
	if err != nil {
		return o, fmt.Errorf("%w %q: %v (want memory?max-bytes=64MiB&max-keys=N&capacity=N)", ErrInvalid, s, err)
	}
	count := func(name, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%w %q: %s=%q: want a positive whole number", ErrInvalid, s, name, v)
		}
		return n, nil
	}
	for name, vs := range vals {
		if len(vs) != 1 {
			return o, fmt.Errorf("%w %q: %s given %d times: give it once", ErrInvalid, s, name, len(vs))
		}
		v := vs[0]
		switch name {
		case "max-bytes":
			n, err := routeconfig.ParseSize(v)
			if err != nil {
				return o, fmt.Errorf("%w %q: max-bytes: %v", ErrInvalid, s, err)
			}
			o.MaxBytes = n
		case "max-keys":
			if o.MaxKeys, err = count(name, v); err != nil {
				return o, err
			}
		case "capacity":
			if o.Capacity, err = count(name, v); err != nil {
				return o, err
			}
		default:
			return o, fmt.Errorf("%w %q: unknown parameter %q: want max-bytes, max-keys or capacity", ErrInvalid, s, name)
		}
	}
	return o, nil
}

// cutQuery splits a memory URL's rest at its query.
func cutQuery(s string) (rest, query string, ok bool) {
	return strings.Cut(s, "?")
}
