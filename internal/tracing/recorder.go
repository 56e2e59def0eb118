package tracing

import (
	"context"
	"strconv"
	"sync"

	"github.com/idem-go/idem"
)

// Recorder is an [idem.Tracer] that keeps every span in memory, for the
// tests of the packages that accept a Tracer (they cannot import idemotel,
// a module of its own). It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	spans []*Recorded
	next  int
}

// Recorded is one span a Recorder started.
type Recorded struct {
	ID     int    // from 1, in start order
	Parent int    // the ID of the span in Start's context, 0 if none
	Op     string // the span's name
	Key    string // what Key was given (the real tracer records only its hash)
	Attrs  map[string]any
	Links  []idem.Carrier
	Ended  int    // how many times End was called: 1 when used rightly
	Result string // End's outcome
	Err    error  // End's error
}

type recKey struct{}

// Start implements [idem.Tracer].
func (r *Recorder) Start(ctx context.Context, op string) (context.Context, idem.Span) {
	parent := 0
	if p, ok := ctx.Value(recKey{}).(*recSpan); ok {
		parent = p.s.ID
	}
	r.mu.Lock()
	r.next++
	s := &Recorded{ID: r.next, Parent: parent, Op: op, Attrs: map[string]any{}}
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	sp := &recSpan{r: r, s: s}
	return context.WithValue(ctx, recKey{}, sp), sp
}

// InjectHeader is the header [Recorder.Inject] writes: the ID of the span
// in the context, in decimal.
const InjectHeader = "X-Recorded-Span"

// Inject implements [idem.Injector]: it writes the ID of ctx's span, if
// any, as [InjectHeader].
func (r *Recorder) Inject(ctx context.Context, set func(name, value string)) {
	if p, ok := ctx.Value(recKey{}).(*recSpan); ok {
		set(InjectHeader, strconv.Itoa(p.s.ID))
	}
}

// Spans returns a copy of the spans started so far, in start order.
func (r *Recorder) Spans() []Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Recorded, len(r.spans))
	for i, s := range r.spans {
		out[i] = *s
		out[i].Attrs = make(map[string]any, len(s.Attrs))
		for k, v := range s.Attrs {
			out[i].Attrs[k] = v
		}
		out[i].Links = append([]idem.Carrier(nil), s.Links...)
	}
	return out
}

// Named returns the spans called op, in start order.
func (r *Recorder) Named(op string) []Recorded {
	var out []Recorded
	for _, s := range r.Spans() {
		if s.Op == op {
			out = append(out, s)
		}
	}
	return out
}

// Reset forgets every span.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.spans = nil
	r.mu.Unlock()
}

type recSpan struct {
	r *Recorder
	s *Recorded
}

func (s *recSpan) Key(key string) {
	s.r.mu.Lock()
	s.s.Key = key
	s.r.mu.Unlock()
}

func (s *recSpan) Attr(name string, value any) {
	s.r.mu.Lock()
	s.s.Attrs[name] = value
	s.r.mu.Unlock()
}

func (s *recSpan) Link(c idem.Carrier) {
	s.r.mu.Lock()
	s.s.Links = append(s.s.Links, c)
	s.r.mu.Unlock()
}

func (s *recSpan) End(outcome string, err error) {
	s.r.mu.Lock()
	s.s.Ended++
	s.s.Result, s.s.Err = outcome, err
	s.r.mu.Unlock()
}
