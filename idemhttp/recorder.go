package idemhttp

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"time"
)

// recorder passes a response to the client and keeps a copy for the store,
// up to a limit. A failed write to the client does not stop the copy: the
// effect happened, and the client's retry must be able to replay it.
//
// Flushes reach the client at once but do not make a response a stream:
// httputil.ReverseProxy flushes every response of unknown length, and Go
// handlers flush once they pass the server's buffer, so treating a flush as a
// stream would leave every chunked response unstored. Only a stream media
// type (text/event-stream by default) or a hijack are streams.
type recorder struct {
	w            http.ResponseWriter
	rc           http.ResponseController
	cfg          *config
	echo         string // the Idempotency-Key value sent back
	room         int    // the room the record leaves for a body of unknown length
	writeTimeout time.Duration
	deadlineSet  bool
	status       int
	// out is the response as it is stored (see record): the head, with
	// the replayed header fields as they were at WriteHeader, and the body
	// written so far from bodyAt on; nil once the body overflowed.
	out       []byte
	bodyAt    int
	written   int // body bytes passed to the client's writer
	overflow  bool
	streamed  bool
	clientErr error
}

func (r *recorder) init(w http.ResponseWriter, cfg *config, echo string, room int) {
	*r = recorder{w: w, rc: *http.NewResponseController(w), cfg: cfg, echo: echo, room: room, writeTimeout: cfg.writeTimeout}
}

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(code int) {
	if r.status != 0 {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		r.w.WriteHeader(code) // informational (103 Early Hints): pass, do not record
		return
	}
	r.status = code
	h := r.w.Header()
	if r.echo != "" {
		// Once, even if the upstream echoed it too.
		if v := h[HeaderKey]; len(v) != 1 || v[0] != r.echo {
			h[HeaderKey] = []string{r.echo}
		}
	}
	if r.cfg.isStream(h.Get("Content-Type")) {
		r.streamed = true
	} else {
		r.out, r.bodyAt = r.cfg.recordHead(code, h, r.room)
	}
	r.w.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.overflow && !r.streamed {
		if len(r.out)-r.bodyAt+len(p) > r.cfg.maxResponse {
			r.overflow = true
			r.out = nil
		} else {
			r.out = append(r.out, p...)
		}
	}
	if r.clientErr == nil {
		if r.written += len(p); r.written > unbufferedAfter {
			r.deadline()
		}
		if _, err := r.w.Write(p); err != nil {
			r.clientErr = err
		}
	}
	return len(p), nil
}

// unbufferedAfter is how much of a response net/http's ResponseWriter holds
// in memory before it writes to the connection (its 2 KiB buffer before
// chunking): smaller writes cannot wait for the client, so they are not
// given a write deadline, a runtime timer set and reset on the connection.
// Flush always is.
const unbufferedAfter = 2 << 10

// deadline bounds the next write to the client, so that a client that stops
// reading cannot hold the response (and the key) past the lease.
func (r *recorder) deadline() {
	if r.writeTimeout <= 0 {
		return
	}
	if err := r.rc.SetWriteDeadline(time.Now().Add(r.writeTimeout)); errors.Is(err, http.ErrNotSupported) {
		r.writeTimeout = 0
		return
	}
	r.deadlineSet = true
}

// resetDeadline clears the write deadline, so that it does not outlive this
// response on a kept-alive connection.
func (r *recorder) resetDeadline() {
	if r.deadlineSet {
		_ = r.rc.SetWriteDeadline(time.Time{})
	}
}

// Flush sends what was written so far to the client; the response is still
// recorded.
func (r *recorder) Flush() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.clientErr == nil {
		r.deadline()
		if err := r.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			r.clientErr = err
		}
	}
}

// Hijack hands the connection to the handler; the response is not stored.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.streamed = true
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return r.rc.Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer for
// deadlines.
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }
