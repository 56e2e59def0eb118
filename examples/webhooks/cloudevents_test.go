package webhooks

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
)

// ceReceiver is a CloudEvents receiver built with the SDK
// (cloudevents.NewHTTPReceiveHandler) behind idemhttp with the CloudEvents
// key source: the key is the event's id, scoped by its source.
type ceReceiver struct {
	srv     *httptest.Server
	arrived atomic.Int64 // requests that reached the server
	calls   atomic.Int64 // the receive function's runs
	mu      sync.Mutex
	// effects counts the events acted on, by source and id.
	effects map[string]int
	// failures makes the next that many runs answer 503 (an overloaded
	// dependency) without acting.
	failures atomic.Int64
	// block, when set, holds the receive function until it is closed;
	// started is closed when a blocked run has started.
	block, started chan struct{}
}

func newCEReceiver(t *testing.T, opts ...idemhttp.Option) *ceReceiver {
	t.Helper()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mw, err := idemhttp.New(store, append([]idemhttp.Option{
		idemhttp.WithKeySource(idemhttp.KeyFromCloudEvents()),
		// One sender here; the event's source is added to the scope.
		idemhttp.WithAllowAnonymous(true),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := &ceReceiver{effects: map[string]int{}}
	p, err := cloudevents.NewHTTP()
	if err != nil {
		t.Fatal(err)
	}
	h, err := cloudevents.NewHTTPReceiveHandler(context.Background(), p, r.receive)
	if err != nil {
		t.Fatal(err)
	}
	idem := mw.Handler(h)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.arrived.Add(1)
		idem.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *ceReceiver) receive(ctx context.Context, ev cloudevents.Event) cloudevents.Result {
	r.calls.Add(1)
	if r.block != nil {
		close(r.started)
		<-r.block
	}
	if r.failures.Add(-1) >= 0 {
		return cloudevents.NewHTTPResult(http.StatusServiceUnavailable, "dependency unavailable")
	}
	r.mu.Lock()
	r.effects[ev.Source()+" "+ev.ID()]++
	r.mu.Unlock()
	return cloudevents.ResultACK
}

func (r *ceReceiver) effectsOf(source, id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effects[source+" "+id]
}

// replayRecorder records the Idempotent-Replayed header of each response
// the SDK's client receives.
type replayRecorder struct {
	mu       sync.Mutex
	replayed []string
}

func (rr *replayRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		rr.mu.Lock()
		rr.replayed = append(rr.replayed, res.Header.Get("Idempotent-Replayed"))
		rr.mu.Unlock()
	}
	return res, err
}

func (rr *replayRecorder) last() string {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if len(rr.replayed) == 0 {
		return "(no response)"
	}
	return rr.replayed[len(rr.replayed)-1]
}

func (r *ceReceiver) client(t *testing.T) (cloudevents.Client, *replayRecorder) {
	t.Helper()
	rr := &replayRecorder{}
	c, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(r.srv.URL), cloudevents.WithRoundTripper(rr))
	if err != nil {
		t.Fatal(err)
	}
	return c, rr
}

func newEvent(t *testing.T, id, source string, data map[string]any) cloudevents.Event {
	t.Helper()
	ev := cloudevents.NewEvent()
	ev.SetID(id)
	ev.SetSource(source)
	ev.SetType("com.example.order.placed")
	ev.SetTime(time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC))
	if err := ev.SetData(cloudevents.ApplicationJSON, data); err != nil {
		t.Fatal(err)
	}
	return ev
}

// status is the HTTP status of a result from the SDK's HTTP client.
func status(res cloudevents.Result) int {
	var rr *cehttp.RetriesResult
	if errors.As(res, &rr) {
		res = rr.Result
	}
	var hr *cehttp.Result
	if errors.As(res, &hr) {
		return hr.StatusCode
	}
	return 0
}

// checkRuns fails t unless the event (source, id) was acted on effects
// times and the receive function ran calls times in all.
func (r *ceReceiver) checkRuns(t *testing.T, what, source, id string, effects int, calls int64) {
	t.Helper()
	if n := r.effectsOf(source, id); n != effects || r.calls.Load() != calls {
		t.Fatalf("%s: acted on %d times in %d runs, want %d in %d", what, n, r.calls.Load(), effects, calls)
	}
}

// receiveWithin returns what c delivers, or fails t with what after 2
// minutes.
func receiveWithin[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(2 * time.Minute):
		t.Fatal(what)
		var zero T
		return zero
	}
}

var modes = map[string]func(context.Context) context.Context{
	"binary":     cloudevents.WithEncodingBinary,
	"structured": cloudevents.WithEncodingStructured,
}

// forEachMode runs f as a parallel subtest in each of the SDK's modes,
// with a new receiver, a client of it, and the mode's encoding.
func forEachMode(t *testing.T, f func(t *testing.T, r *ceReceiver, c cloudevents.Client, rr *replayRecorder, encode func(context.Context) context.Context)) {
	t.Helper()
	for mode, encode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newCEReceiver(t)
			c, rr := r.client(t)
			f(t, r, c, rr, encode)
		})
	}
}

// TestCloudEventsDuplicate: the SDK's client sends one event twice, in
// binary and in structured mode. Both sends are ACKs (the second a replay
// of the stored 200), and the event is acted on once.
func TestCloudEventsDuplicate(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, r *ceReceiver, c cloudevents.Client, rr *replayRecorder, encode func(context.Context) context.Context) {
		ctx := encode(context.Background())
		ev := newEvent(t, "order-1", "/shop/eu", map[string]any{"order": 1, "total": 42.5})
		if res := c.Send(ctx, ev); !cloudevents.IsACK(res) || status(res) != 200 || rr.last() != "" {
			t.Fatalf("first send: %v (status %d, replayed %q), want a 200 ACK", res, status(res), rr.last())
		}
		if res := c.Send(ctx, ev); !cloudevents.IsACK(res) || status(res) != 200 || rr.last() != "true" {
			t.Fatalf("duplicate: %v (status %d, replayed %q), want the stored 200 replayed, an ACK", res, status(res), rr.last())
		}
		r.checkRuns(t, "after the duplicate", "/shop/eu", "order-1", 1, 1)
		// The same id from another source is another event (the spec
		// makes id unique per source).
		other := newEvent(t, "order-1", "/shop/us", map[string]any{"order": 1, "total": 42.5})
		if res := c.Send(ctx, other); !cloudevents.IsACK(res) || rr.last() != "" || r.effectsOf("/shop/us", "order-1") != 1 {
			t.Fatalf("same id, other source: %v (replayed %q), want it run", res, rr.last())
		}
		// Another id from the first source runs.
		if res := c.Send(ctx, newEvent(t, "order-2", "/shop/eu", map[string]any{"order": 2})); !cloudevents.IsACK(res) || r.effectsOf("/shop/eu", "order-2") != 1 {
			t.Fatalf("another id: %v, want it run", res)
		}
		// A different event under a colliding (source, id): 422, a NACK
		// the SDK does not retry; not acted on.
		changed := newEvent(t, "order-1", "/shop/eu", map[string]any{"order": 1, "total": 99})
		if res := c.Send(ctx, changed); !cloudevents.IsNACK(res) || status(res) != 422 {
			t.Fatalf("changed event under order-1: %v (status %d), want a 422 NACK", res, status(res))
		}
		r.checkRuns(t, "after the 422", "/shop/eu", "order-1", 1, 3)
	})
}

// TestCloudEventsSDKRetries: with the SDK's retries on (it retries 404,
// 413, 425, 429, 502, 503 and 504), a 503 from the receiver is released, so
// the SDK's retry runs and is acted on once; a later redelivery is absorbed.
func TestCloudEventsSDKRetries(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, r *ceReceiver, c cloudevents.Client, rr *replayRecorder, encode func(context.Context) context.Context) {
		ctx := cloudevents.ContextWithRetriesConstantBackoff(encode(context.Background()), time.Millisecond, 5)
		ev := newEvent(t, "order-7", "/shop/eu", map[string]any{"order": 7})
		r.failures.Store(2)
		res := c.Send(ctx, ev)
		var retries *cehttp.RetriesResult
		if !cloudevents.IsACK(res) || !errors.As(res, &retries) || retries.Retries != 2 {
			t.Fatalf("send with two 503s first: %v, want an ACK after 2 retries", res)
		}
		// Two released 503s, then the effect.
		r.checkRuns(t, "after the retries", "/shop/eu", "order-7", 1, 3)
		if res := c.Send(ctx, ev); !cloudevents.IsACK(res) || rr.last() != "true" || r.calls.Load() != 3 {
			t.Fatalf("redelivery: %v (replayed %q), %d runs, want the stored ACK and no run", res, rr.last(), r.calls.Load())
		}
	})
}

// TestCloudEventsConcurrentDuplicate: a duplicate sent while the first is
// still being handled gets 409 in-progress, which the SDK does not retry
// (409 is not in its list): the sender sees a NACK although the event is
// being handled. With WithWait the duplicate waits for the first and gets
// its stored answer, an ACK. Either way the event is acted on once.
func TestCloudEventsConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	for _, wait := range []bool{false, true} {
		name := "no-wait"
		var opts []idemhttp.Option
		if wait {
			name, opts = "wait", []idemhttp.Option{idemhttp.WithWait(2 * time.Minute)}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newCEReceiver(t, opts...)
			r.block, r.started = make(chan struct{}), make(chan struct{})
			c, _ := r.client(t)
			ctx := cloudevents.ContextWithRetriesConstantBackoff(cloudevents.WithEncodingBinary(context.Background()), time.Millisecond, 5)
			ev := newEvent(t, "order-3", "/shop/eu", map[string]any{"order": 3})
			first := make(chan cloudevents.Result, 1)
			go func() { first <- c.Send(ctx, ev) }()
			receiveWithin(t, r.started, "the first send never reached the receiver")
			dup := make(chan cloudevents.Result, 1)
			go func() { dup <- c.Send(ctx, ev) }()
			// The duplicate reaches the receiver while the first is held.
			for deadline := time.Now().Add(2 * time.Minute); r.arrived.Load() < 2; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the duplicate never reached the receiver")
				}
			}
			var res cloudevents.Result
			if !wait {
				// The 409 comes back while the first still runs.
				res = receiveWithin(t, dup, "the duplicate got no answer")
			}
			close(r.block)
			if wait {
				res = receiveWithin(t, dup, "the duplicate got no answer")
			}
			if f := receiveWithin(t, first, "the first send got no answer"); !cloudevents.IsACK(f) {
				t.Fatalf("first send: %v", f)
			}
			var retries *cehttp.RetriesResult
			switch {
			case !wait && (!cloudevents.IsNACK(res) || status(res) != 409 || !errors.As(res, &retries) || retries.Retries != 0):
				t.Fatalf("duplicate in progress: %v (status %d), want a 409 NACK, not retried", res, status(res))
			case wait && (!cloudevents.IsACK(res) || status(res) != 200):
				t.Fatalf("duplicate with WithWait: %v (status %d), want the stored 200", res, status(res))
			}
			r.checkRuns(t, "after the duplicate", "/shop/eu", "order-3", 1, 1)
		})
	}
}

// TestCloudEventsResendWithoutTime: the SDK's client stamps an event that
// has no time with the time of each Send. Sent again in structured mode,
// the body differs, so the default raw fingerprint answers 422; a
// fingerprint over the fields that define the event absorbs it. In binary
// mode the time is a header, outside the fingerprint.
func TestCloudEventsResendWithoutTime(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mode   func(context.Context) context.Context
		opts   []idemhttp.Option
		status int
	}{
		{"structured/raw", cloudevents.WithEncodingStructured, nil, 422},
		{"structured/fields", cloudevents.WithEncodingStructured, []idemhttp.Option{idemhttp.WithBodyFingerprint(idemhttp.JSONFields("type", "data"))}, 200},
		{"binary/raw", cloudevents.WithEncodingBinary, nil, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newCEReceiver(t, tc.opts...)
			c, _ := r.client(t)
			ctx := tc.mode(context.Background())
			ev := newEvent(t, "order-5", "/shop/eu", map[string]any{"order": 5})
			ev.SetTime(time.Time{})
			if res := c.Send(ctx, ev); !cloudevents.IsACK(res) {
				t.Fatalf("first send: %v", res)
			}
			// Wait until the SDK's clock has moved on, so that the stamp
			// differs (RFC 3339 with nanoseconds).
			for start := time.Now(); time.Now().Equal(start); {
				time.Sleep(time.Microsecond)
			}
			if res := c.Send(ctx, ev); status(res) != tc.status {
				t.Fatalf("second send: %v (status %d), want %d", res, status(res), tc.status)
			}
			r.checkRuns(t, "after the second send", "/shop/eu", "order-5", 1, 1)
		})
	}
}
