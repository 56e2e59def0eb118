package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// stripeAccounts are the Stripe accounts (one webhook endpoint and signing
// secret each) that post to the receiver, at /hooks/stripe/{account}.
var stripeAccounts = map[string]string{
	"acct_a": "whsec_test_account_a",
	"acct_b": "whsec_test_account_b",
}

type senderKey struct{}

// verifyStripe checks the Stripe-Signature header with the signing secret
// of the account the URL names, before the idempotency middleware (an
// unverified request must not reserve a key), and passes the account on as
// the sender that the middleware scopes keys by.
func verifyStripe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account := r.PathValue("account")
		secret, ok := stripeAccounts[account]
		if !ok {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := webhook.ValidatePayload(body, r.Header.Get("Stripe-Signature"), secret); err != nil {
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), senderKey{}, account)))
	})
}

// stripeReceiver is a Stripe webhook endpoint behind idemhttp: key from the
// event's id (a JMESPath over the body), scoped by the verified account.
type stripeReceiver struct {
	srv *httptest.Server
	// calls counts the handler's runs; effects the events it acted on, by
	// account and event id.
	calls   atomic.Int64
	mu      sync.Mutex
	effects map[string]int
	// fail makes the handler answer 500 before acting (a database outage)
	// while it is set.
	fail atomic.Bool
	// block, when set, holds the handler until it is closed; started is
	// closed when a blocked handler has started.
	block, started chan struct{}
}

func newStripeReceiver(t *testing.T, fp idemhttp.BodyFingerprint) *stripeReceiver {
	t.Helper()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mw, err := idemhttp.New(store,
		idemhttp.WithKeySource(idemhttp.KeyFromJSON("id")),
		idemhttp.WithBodyFingerprint(fp),
		idemhttp.WithScopeFunc(func(r *http.Request) (string, error) {
			account, ok := r.Context().Value(senderKey{}).(string)
			if !ok {
				return "", idemhttp.ErrNoPrincipal
			}
			return "stripe:" + account, nil
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	s := &stripeReceiver{effects: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/stripe/{account}", verifyStripe(mw.Handler(http.HandlerFunc(s.handle))))
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// handle is the receiver's handler: it parses the event as stripe-go does
// (ConstructEvent checks the signature again, and the API version) and acts
// on it once per delivery that reaches it.
func (s *stripeReceiver) handle(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	account := r.PathValue("account")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ev, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), stripeAccounts[account])
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.block != nil {
		close(s.started)
		<-s.block
	}
	if s.fail.Load() {
		http.Error(w, "database unavailable", http.StatusInternalServerError)
		return
	}
	if ev.Type != "payment_intent.succeeded" {
		http.Error(w, "unhandled event type "+string(ev.Type), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.effects[account+"/"+ev.ID]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"received":%q,"amount":%d}`, ev.ID, amountOf(ev))
}

func amountOf(ev stripe.Event) int64 {
	a, _ := ev.Data.Object["amount"].(float64)
	return int64(a)
}

func (s *stripeReceiver) effectsOf(account, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[account+"/"+id]
}

// delivery is what the sender got back.
type delivery struct {
	status   int
	replayed string
	problem  string
	header   http.Header
	body     string
}

// deliver signs payload with the account's secret as Stripe does (a fresh
// timestamp per attempt, as on Stripe's retries) and posts it.
func (s *stripeReceiver) deliver(t *testing.T, account string, payload []byte) delivery {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: stripeAccounts[account]})
	return s.post(t, account, signed.Payload, signed.Header)
}

func (s *stripeReceiver) post(t *testing.T, account string, payload []byte, signature string) delivery {
	t.Helper()
	d, err := s.send(account, payload, signature)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// expect delivers payload from account and fails t unless the answer has
// status and Idempotent-Replayed replayed ("" or "true"); what names the
// delivery.
func (s *stripeReceiver) expect(t *testing.T, what, account string, payload []byte, status int, replayed string) delivery {
	t.Helper()
	d := s.deliver(t, account, payload)
	if d.status != status || d.replayed != replayed {
		t.Fatalf("%s: %+v, want %d with Idempotent-Replayed %q", what, d, status, replayed)
	}
	return d
}

// expectStored delivers payload from account twice and fails t unless the
// first is answered status and the redelivery gets that answer replayed
// (Idempotent-Replayed: true).
func (s *stripeReceiver) expectStored(t *testing.T, what, account string, payload []byte, status int) {
	t.Helper()
	s.expect(t, what, account, payload, status, "")
	s.expect(t, what+", redelivered", account, payload, status, "true")
}

// checkRuns fails t unless the event id from account was acted on effects
// times and the handler ran calls times in all.
func (s *stripeReceiver) checkRuns(t *testing.T, what, account, id string, effects int, calls int64) {
	t.Helper()
	if n := s.effectsOf(account, id); n != effects || s.calls.Load() != calls {
		t.Fatalf("%s: %s acted on %d times in %d handler runs, want %d in %d", what, id, n, s.calls.Load(), effects, calls)
	}
}

// send is post for another goroutine than the test's.
func (s *stripeReceiver) send(account string, payload []byte, signature string) (delivery, error) {
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/hooks/stripe/"+account, bytes.NewReader(payload))
	if err != nil {
		return delivery{}, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", signature)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return delivery{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return delivery{}, err
	}
	d := delivery{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed"), header: res.Header, body: string(b)}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
		var p struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &p)
		d.problem = p.Type[strings.LastIndexAny(p.Type, "/#")+1:]
	}
	return d, nil
}

// stripeEvent is a Stripe event as the API sends it, compact with its names
// sorted (encoding/json's order for a map).
func stripeEvent(t *testing.T, id, typ string, amount int) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"id":               id,
		"object":           "event",
		"api_version":      stripe.APIVersion,
		"created":          1764921600,
		"livemode":         false,
		"pending_webhooks": 1,
		"request":          map[string]any{"id": nil, "idempotency_key": nil},
		"type":             typ,
		"data": map[string]any{"object": map[string]any{
			"id": "pi_3Q", "object": "payment_intent", "amount": amount, "currency": "eur", "status": "succeeded",
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reencoded is the same event as stripeEvent, re-serialised: other name
// order, indentation, and escapes for characters that need none.
func reencoded(id, typ string, amount int) []byte {
	return fmt.Appendf(nil, `{
  "type": %q,
  "data": {"object": {"status": "succeeded", "currency": "\u0065ur", "amount": %d.0, "object": "payment_intent", "id": "pi_3Q"}},
  "request": {"idempotency_key": null, "id": null},
  "pending_webhooks": 1, "livemode": false,
  "created": 1764921600,
  "api_version": %q,
  "object": "event",
  "id": %q
}`, typ, amount, stripe.APIVersion, id)
}

// TestStripeRedeliveries: events signed by stripe-go and verified with its
// webhook.ConstructEvent, keyed by the event's id (JMESPath "id") and
// scoped by the Stripe account, with a canonical JSON fingerprint. Each
// outcome is a row of docs/webhooks.md "What a sender gets back".
func TestStripeRedeliveries(t *testing.T) {
	t.Parallel()
	s := newStripeReceiver(t, idemhttp.CanonicalJSON())
	evt := stripeEvent(t, "evt_1", "payment_intent.succeeded", 2000)

	first := s.expect(t, "new delivery", "acct_a", evt, 200, "")
	if !strings.Contains(first.body, `"evt_1"`) {
		t.Fatalf("new delivery: %+v, want the handler's 200", first)
	}
	// Stripe's retry: the same payload, signed again with a later timestamp.
	if again := s.expect(t, "redelivery", "acct_a", evt, 200, "true"); again.body != first.body {
		t.Fatalf("redelivery: %+v, want the stored 200 replayed", again)
	}
	// The same event re-serialised (names reordered, white space, escapes,
	// 2000.0 for 2000): the same under canonical JSON.
	if re := s.expect(t, "re-serialised redelivery", "acct_a", reencoded("evt_1", "payment_intent.succeeded", 2000), 200, "true"); re.body != first.body {
		t.Fatalf("re-serialised redelivery: %+v, want the stored 200 replayed", re)
	}
	s.checkRuns(t, "after the redeliveries", "acct_a", "evt_1", 1, 1)

	// Another event runs.
	s.expect(t, "another event", "acct_a", stripeEvent(t, "evt_2", "payment_intent.succeeded", 500), 200, "")
	s.checkRuns(t, "another event", "acct_a", "evt_2", 1, 2)
	// The same id from another account is another key (scope by sender).
	s.expect(t, "evt_1 from acct_b", "acct_b", evt, 200, "")
	s.checkRuns(t, "evt_1 from acct_b", "acct_b", "evt_1", 1, 3)
	// A different event under the same id (the amount differs): 422.
	if d := s.deliver(t, "acct_a", stripeEvent(t, "evt_1", "payment_intent.succeeded", 2001)); d.status != 422 || d.problem != "key-reused" {
		t.Fatalf("evt_1 with another amount: %+v, want 422 key-reused", d)
	}
	s.checkRuns(t, "after the 422", "acct_a", "evt_1", 1, 3)
}

// TestStripeRawFingerprint: under the default raw-body fingerprint an exact
// redelivery is replayed (Stripe-Signature differs on each attempt and is
// not fingerprinted), and any other body under the same id, re-encoded or
// changed, is 422 key-reused and does not run.
func TestStripeRawFingerprint(t *testing.T) {
	t.Parallel()
	s := newStripeReceiver(t, idemhttp.RawBody())
	evt := stripeEvent(t, "evt_1", "payment_intent.succeeded", 2000)
	s.expectStored(t, "new delivery", "acct_a", evt, 200)
	for name, body := range map[string][]byte{
		"re-serialised":  reencoded("evt_1", "payment_intent.succeeded", 2000),
		"another amount": stripeEvent(t, "evt_1", "payment_intent.succeeded", 2001),
	} {
		if d := s.deliver(t, "acct_a", body); d.status != 422 || d.problem != "key-reused" {
			t.Errorf("%s under evt_1: %+v, want 422 key-reused", name, d)
		}
	}
	s.checkRuns(t, "after the 422s", "acct_a", "evt_1", 1, 1)
}

// TestStripeUnverifiedReservesNothing: a delivery whose signature does not
// verify is refused before the middleware, so the real one still runs.
func TestStripeUnverifiedReservesNothing(t *testing.T) {
	t.Parallel()
	s := newStripeReceiver(t, idemhttp.CanonicalJSON())
	evt := stripeEvent(t, "evt_1", "payment_intent.succeeded", 2000)
	forged := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: evt, Secret: "whsec_not_the_accounts"})
	if d := s.post(t, "acct_a", forged.Payload, forged.Header); d.status != 400 || s.calls.Load() != 0 {
		t.Fatalf("forged: %+v, %d handler runs, want 400 and none", d, s.calls.Load())
	}
	s.expect(t, "the real delivery after a forged one", "acct_a", evt, 200, "")
	s.checkRuns(t, "the real delivery after a forged one", "acct_a", "evt_1", 1, 1)
}

// TestStripeHandlerFailure: a 5xx from the handler is released, so Stripe's
// retry runs the handler again; once it succeeds the answer is stored.
func TestStripeHandlerFailure(t *testing.T) {
	t.Parallel()
	s := newStripeReceiver(t, idemhttp.CanonicalJSON())
	evt := stripeEvent(t, "evt_1", "payment_intent.succeeded", 2000)
	s.fail.Store(true)
	s.expect(t, "failing handler", "acct_a", evt, 500, "")
	// The handler's 500 again, not a stored one.
	s.expect(t, "retry while failing", "acct_a", evt, 500, "")
	s.checkRuns(t, "retry while failing", "acct_a", "evt_1", 0, 2)
	s.fail.Store(false)
	s.expectStored(t, "retry after recovery", "acct_a", evt, 200)
	s.checkRuns(t, "after the recovery", "acct_a", "evt_1", 1, 3)
}

// TestStripeStored4xx: a 4xx from the handler (an event type it does not
// handle) is stored by default, so Stripe's retries get it replayed and the
// handler is not run again.
func TestStripeStored4xx(t *testing.T) {
	t.Parallel()
	s := newStripeReceiver(t, idemhttp.CanonicalJSON())
	evt := stripeEvent(t, "evt_9", "customer.created", 0)
	s.expectStored(t, "unhandled type", "acct_a", evt, 400)
	s.checkRuns(t, "retry", "acct_a", "evt_9", 0, 1)
}

// TestStripeRedeliveryInProgress: a redelivery while the first still runs
// gets 409 in-progress with Retry-After; its later retry gets the stored
// answer, and the handler ran once.
func TestStripeRedeliveryInProgress(t *testing.T) {
	t.Parallel()
	s := newStripeReceiver(t, idemhttp.CanonicalJSON())
	evt := stripeEvent(t, "evt_1", "payment_intent.succeeded", 2000)
	s.block, s.started = make(chan struct{}), make(chan struct{})
	firstDone := make(chan delivery, 1)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: evt, Secret: stripeAccounts["acct_a"]})
	go func() {
		d, err := s.send("acct_a", signed.Payload, signed.Header)
		if err != nil {
			d.body = err.Error()
		}
		firstDone <- d
	}()
	receiveWithin(t, s.started, "the first delivery never reached the handler")
	d := s.deliver(t, "acct_a", evt)
	close(s.block)
	first := receiveWithin(t, firstDone, "the first delivery never finished")
	if d.status != 409 || d.problem != "in-progress" || d.header.Get("Retry-After") == "" {
		t.Fatalf("redelivery in progress: %+v, want 409 in-progress with Retry-After", d)
	}
	if first.status != 200 {
		t.Fatalf("first delivery: %+v", first)
	}
	s.expect(t, "retry after the first finished", "acct_a", evt, 200, "true")
	s.checkRuns(t, "retry after the first finished", "acct_a", "evt_1", 1, 1)
}
