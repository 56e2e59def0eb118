package idemhttp

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
)

// recorder passes a response to the client and keeps a copy for the store,
// up to a limit. A failed write to the client does not stop the copy: the
// effect happened, and the client's retry must be able to replay it.
type recorder struct {
	w         http.ResponseWriter
	limit     int
	status    int
	header    http.Header // snapshot at WriteHeader
	body      bytes.Buffer
	overflow  bool
	streamed  bool
	clientErr error
}

func newRecorder(w http.ResponseWriter, limit int) *recorder {
	return &recorder{w: w, limit: limit}
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
	r.header = r.w.Header().Clone()
	r.w.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.overflow {
		if r.body.Len()+len(p) > r.limit {
			r.overflow = true
			r.body = bytes.Buffer{}
		} else {
			r.body.Write(p)
		}
	}
	if r.clientErr == nil {
		if _, err := r.w.Write(p); err != nil {
			r.clientErr = err
		}
	}
	return len(p), nil
}

// Flush marks the response as streamed: it is delivered but not stored.
func (r *recorder) Flush() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.streamed = true
	if f, ok := r.w.(http.Flusher); ok && r.clientErr == nil {
		f.Flush()
	}
}

// Hijack hands the connection to the handler; the response is not stored.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.streamed = true
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(r.w).Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer for
// deadlines.
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }
