package keystoreprom_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/keystoreprom"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/storetest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// clock is a hand-moved clock for the memstore under the wrapper.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// wrap wraps s with metrics registered in a new pedantic registry.
func wrap(t *testing.T, s keystore.Store, opts ...keystoreprom.Option) (*keystoreprom.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := keystoreprom.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Wrap(s)
	if err != nil {
		t.Fatal(err)
	}
	return w, reg
}

func newWrapped(t *testing.T) (*keystoreprom.Store, *clock, *prometheus.Registry) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	mem, err := memstore.New(memstore.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	m, reg := wrap(t, mem, keystoreprom.WithConstLabels(prometheus.Labels{"store": "memory"}))
	return m, clk, reg
}

// The wrapper changes no behaviour.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		m, _ := wrap(t, dbtest.MemStore(t))
		return m
	})
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	m, clk, reg := newWrapped(t)

	c, _ := m.Reserve(ctx, "a", []byte("fp"), time.Second) // acquired
	m.Reserve(ctx, "a", nil, time.Second)                  // in progress
	m.Reserve(ctx, "a", []byte("other"), time.Second)      // mismatch
	m.Reserve(ctx, "", nil, time.Second)                   // error
	if err := m.Complete(ctx, c, []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	m.Reserve(ctx, "a", nil, time.Second) // done
	stale := c
	stale.Token++
	m.Complete(ctx, stale, nil, time.Hour) // lease lost
	m.Release(ctx, stale)                  // lease lost

	old, _ := m.Reserve(ctx, "b", nil, time.Second) // acquired
	clk.t = clk.t.Add(2 * time.Second)
	n, _ := m.Reserve(ctx, "b", nil, time.Second) // acquired, takeover
	if !n.Takeover || n.Token <= old.Token {
		t.Fatalf("takeover claim %+v", n)
	}
	m.Complete(ctx, n, nil, 0) // input error
	clk.t = clk.t.Add(2 * time.Second)
	if swept, err := m.Sweep(ctx, 10); err != nil || swept != 1 {
		t.Fatalf("Sweep: %d %v", swept, err)
	}

	want := `
# HELP idem_keystore_reservations_total Reserve calls by outcome: acquired, in_progress, done, mismatch, error.
# TYPE idem_keystore_reservations_total counter
idem_keystore_reservations_total{outcome="acquired",store="memory"} 3
idem_keystore_reservations_total{outcome="done",store="memory"} 1
idem_keystore_reservations_total{outcome="error",store="memory"} 1
idem_keystore_reservations_total{outcome="in_progress",store="memory"} 1
idem_keystore_reservations_total{outcome="mismatch",store="memory"} 1
# HELP idem_keystore_lease_takeovers_total Acquisitions that replaced an expired lease whose holder neither completed nor released.
# TYPE idem_keystore_lease_takeovers_total counter
idem_keystore_lease_takeovers_total{store="memory"} 1
# HELP idem_keystore_lease_lost_total Complete, Release or Extend refused because the claim's token is no longer current.
# TYPE idem_keystore_lease_lost_total counter
idem_keystore_lease_lost_total{op="complete",store="memory"} 1
idem_keystore_lease_lost_total{op="extend",store="memory"} 0
idem_keystore_lease_lost_total{op="release",store="memory"} 1
# HELP idem_keystore_errors_total Calls that failed with a store or input error (not mismatch or lease lost).
# TYPE idem_keystore_errors_total counter
idem_keystore_errors_total{op="complete",store="memory"} 1
idem_keystore_errors_total{op="extend",store="memory"} 0
idem_keystore_errors_total{op="release",store="memory"} 0
idem_keystore_errors_total{op="reserve",store="memory"} 1
idem_keystore_errors_total{op="sweep",store="memory"} 0
# HELP idem_keystore_swept_total Expired keys deleted by Sweep.
# TYPE idem_keystore_swept_total counter
idem_keystore_swept_total{store="memory"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"idem_keystore_reservations_total", "idem_keystore_lease_takeovers_total", "idem_keystore_lease_lost_total",
		"idem_keystore_errors_total", "idem_keystore_swept_total"); err != nil {
		t.Fatal(err)
	}
	// Every call was timed: 9 Reserves, 4 Completes, 1 Release, 1 Sweep
	// (and a zero series for Extend).
	if n, err := testutil.GatherAndCount(reg, "idem_keystore_operation_duration_seconds"); n != 5 || err != nil {
		t.Fatalf("%d duration series, want 5 (%v)", n, err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

func TestScopeAndSweepUnsupported(t *testing.T) {
	m, _ := wrap(t, onlyStore{})
	if _, err := m.Scope("x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Scope: %v", err)
	}
	if _, err := m.Sweep(context.Background(), 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Sweep: %v", err)
	}
	if _, err := m.Extend(context.Background(), keystore.Claim{}, time.Second); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Extend: %v", err)
	}
	if _, err := m.Inspect(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Inspect: %v", err)
	}
	if _, _, err := m.List(context.Background(), keystore.ListOptions{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("List: %v", err)
	}
	if err := m.Forget(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Forget: %v", err)
	}
	if keystore.CanExtend(m) {
		t.Fatal("CanExtend true for a wrapper around a store that cannot renew")
	}
	if _, _, err := m.Notify(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Notify: %v", err)
	}
	if keystore.CanNotify(m) {
		t.Fatal("CanNotify true for a wrapper around a store that cannot notify")
	}
	if m.Unwrap() != (onlyStore{}) {
		t.Fatal("Unwrap")
	}
}

func TestOptions(t *testing.T) {
	if _, err := keystoreprom.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("New(nil): %v", err)
	}
	if _, err := keystoreprom.New(prometheus.NewRegistry(), keystoreprom.WithBuckets([]float64{1, 1})); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("bad buckets: %v", err)
	}
	m, err := keystoreprom.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Wrap(nil); !errors.Is(err, idem.ErrInvalidArgument) {
		t.Fatalf("Wrap(nil): %v", err)
	}
	_, reg := wrap(t, onlyStore{}, keystoreprom.WithNamespace("acme"))
	if n, err := testutil.GatherAndCount(reg, "acme_keystore_reservations_total"); n != 5 || err != nil {
		t.Fatalf("%d series in namespace acme, want 5 (%v)", n, err)
	}
}

// onlyStore implements nothing but keystore.Store.
type onlyStore struct{}

func (onlyStore) Reserve(context.Context, string, []byte, time.Duration) (keystore.Claim, error) {
	return keystore.Claim{}, errors.New("unused")
}
func (onlyStore) Complete(context.Context, keystore.Claim, []byte, time.Duration) error { return nil }
func (onlyStore) Release(context.Context, keystore.Claim) error                         { return nil }

// A store wrapped with metrics, one label naming it: every call is counted.
func ExampleMetrics_Wrap() {
	reg := prometheus.NewRegistry()
	m, err := keystoreprom.New(reg, keystoreprom.WithConstLabels(prometheus.Labels{"store": "memory"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	mem, _ := memstore.New()
	s, err := m.Wrap(mem)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for range 2 {
		_, replayed, err := keystore.Do(ctx, s, "charge-42", nil, func(context.Context) ([]byte, error) {
			return []byte("ok"), nil
		})
		fmt.Println("replayed:", replayed, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			if mf.GetName() == "idem_keystore_reservations_total" && x.GetCounter().GetValue() > 0 {
				fmt.Println(mf.GetName(), x.GetLabel()[0].GetValue(), x.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// replayed: false <nil>
	// replayed: true <nil>
	// idem_keystore_reservations_total acquired 1
	// idem_keystore_reservations_total done 1
}
