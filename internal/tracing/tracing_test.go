package tracing_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/tracing"
)

func TestStartNil(t *testing.T) {
	ctx := context.Background()
	got, s := tracing.Start(ctx, nil, idem.OpInboxProcess)
	if got != ctx || s != tracing.Nop {
		t.Fatal("a nil tracer changed the context or returned a span that records")
	}
	s.Key("k")
	s.Attr("a", 1)
	s.Link(tracing.Headers{})
	s.End("x", errors.New("e"))
	if n := testing.AllocsPerRun(100, func() {
		_, s := tracing.Start(ctx, nil, idem.OpInboxProcess)
		s.Key("k")
		s.End("applied", nil)
	}); n != 0 {
		t.Fatalf("%v allocations without a tracer", n)
	}
}

func TestHeaders(t *testing.T) {
	h := tracing.Headers{"traceparent": "x", "b": "y"}
	if h.Get("traceparent") != "x" || h.Get("none") != "" {
		t.Fatal("Get")
	}
	keys := h.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"b", "traceparent"}) {
		t.Fatalf("Keys %v", keys)
	}
}

// The recorder nests spans by context, counts Ends and is safe for
// concurrent use.
func TestRecorder(t *testing.T) {
	r := &tracing.Recorder{}
	ctx, parent := r.Start(context.Background(), "parent")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, s := r.Start(ctx, "child")
			s.Attr("n", 1)
			s.End("ok", nil)
		})
	}
	wg.Wait()
	var injected string
	r.Inject(ctx, func(name, v string) {
		if name == tracing.InjectHeader {
			injected = v
		}
	})
	parent.End("done", nil)
	children := r.Named("child")
	if len(children) != 8 || injected != "1" {
		t.Fatalf("%d children, injected %q", len(children), injected)
	}
	for _, c := range children {
		if c.Parent != 1 || c.Ended != 1 || c.Attrs["n"] != 1 {
			t.Fatalf("child %+v", c)
		}
	}
	r.Reset()
	if len(r.Spans()) != 0 {
		t.Fatal("Reset kept spans")
	}
}
