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

func (c *capture) SetHeader(md metadata.MD) error {
	if c.inner != nil {
		if err := c.inner.SetHeader(md); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.header = metadata.Join(c.header, md)
	c.mu.Unlock()
	return nil
}

func (c *capture) SendHeader(md metadata.MD) error {
	if c.inner != nil {
		if err := c.inner.SendHeader(md); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.header = metadata.Join(c.header, md)
	c.mu.Unlock()
	return nil
}

func (c *capture) SetTrailer(md metadata.MD) error {
	if c.inner != nil {
		if err := c.inner.SetTrailer(md); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.trailer = metadata.Join(c.trailer, md)
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
