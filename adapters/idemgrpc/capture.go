package idemgrpc

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// capture wraps the call's ServerTransportStream so that the header and
// trailer metadata the handler sets (grpc.SetHeader, SendHeader, SetTrailer)
// are seen, to be stored, while still reaching the client.
type capture struct {
	inner grpc.ServerTransportStream // nil outside a gRPC server

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

func (c *capture) Method() string {
	if c.inner == nil {
		return ""
	}
	return c.inner.Method()
}

// SetHeader passes md on and keeps it as header.
func (c *capture) SetHeader(md metadata.MD) error {
	return c.keep(&c.header, md, func(s grpc.ServerTransportStream) error { return s.SetHeader(md) })
}

// SendHeader passes md on and keeps it as header.
func (c *capture) SendHeader(md metadata.MD) error {
	return c.keep(&c.header, md, func(s grpc.ServerTransportStream) error { return s.SendHeader(md) })
}

// SetTrailer passes md on and keeps it as trailer.
func (c *capture) SetTrailer(md metadata.MD) error {
	return c.keep(&c.trailer, md, func(s grpc.ServerTransportStream) error { return s.SetTrailer(md) })
}

// keep passes md to the wrapped stream, when there is one, and adds it to
// into once the stream has taken it.
func (c *capture) keep(into *metadata.MD, md metadata.MD, pass func(grpc.ServerTransportStream) error) error {
	if c.inner != nil {
		if err := pass(c.inner); err != nil {
			return err
		}
	}
	c.mu.Lock()
	*into = metadata.Join(*into, md)
	c.mu.Unlock()
	return nil
}

// kept returns the allow-listed entries of header and trailer.
func (c *capture) kept(allow map[string]bool) (header, trailer metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return filterMD(c.header, allow), filterMD(c.trailer, allow)
}

func filterMD(md metadata.MD, allow map[string]bool) metadata.MD {
	out := metadata.MD{}
	for k, vs := range md {
		if allow[k] {
			out[k] = append([]string(nil), vs...)
		}
	}
	return out
}
