package keystore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
	"github.com/idem-go/idem/keystore"
)

// faulty wraps a store and fails the calls it is told to.
type faulty struct {
	keystore.Store
	completeErr, releaseErr error
	completeCtxErr          error // ctx.Err() seen by Complete
}

func (f *faulty) Complete(ctx context.Context, c keystore.Claim, r []byte, ttl time.Duration) error {
	f.completeCtxErr = ctx.Err()
	if f.completeErr != nil {
		return f.completeErr
	}
	return f.Store.Complete(ctx, c, r, ttl)
}

func (f *faulty) Release(ctx context.Context, c keystore.Claim) error {
	if f.releaseErr != nil {
		return f.releaseErr
	}
	return f.Store.Release(ctx, c)
}

var (
	errEffect = errors.New("effect failed")
	errStore  = errors.New("store down")
)

func TestDoReleaseFails(t *testing.T) {
	ctx := context.Background()
	mem := dbtest.MemStore(t)
	s := &faulty{Store: mem, releaseErr: errStore}
	_, _, err := keystore.Do(ctx, s, "k", nil, func(context.Context) ([]byte, error) { return nil, errEffect }, keystore.WithLease(time.Minute))
	if !errors.Is(err, errEffect) || !errors.Is(err, errStore) {
		t.Fatalf("Do: %v, want fn's error joined with the release error", err)
	}
	// The key stays in progress until its lease expires.
	if c, _ := mem.Reserve(ctx, "k", nil, time.Minute); c.State != keystore.InProgress {
		t.Fatalf("after a failed Release: %v", c.State)
	}
}

func TestDoCompleteFails(t *testing.T) {
	ctx := context.Background()
	mem := dbtest.MemStore(t)
	s := &faulty{Store: mem, completeErr: errStore}
	res, replayed, err := keystore.Do(ctx, s, "k", nil, func(context.Context) ([]byte, error) { return []byte("r"), nil })
	if !errors.Is(err, errStore) || string(res) != "r" || replayed {
		t.Fatalf("Do: %q %v %v, want fn's result and the Complete error", res, replayed, err)
	}
	// Not released: the effect happened, so retries wait for the lease.
	if _, _, err := keystore.Do(ctx, mem, "k", nil, func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, keystore.ErrInProgress) {
		t.Fatalf("retry after a failed Complete: %v, want ErrInProgress", err)
	}
}

// A cancelled ctx does not stop Do from recording the effect that happened.
func TestDoCompletesAfterCancel(t *testing.T) {
	mem := dbtest.MemStore(t)
	s := &faulty{Store: mem}
	ctx, cancel := context.WithCancel(context.Background())
	res, _, err := keystore.Do(ctx, s, "k", nil, func(context.Context) ([]byte, error) {
		cancel() // the caller gives up while the effect completes
		return []byte("r"), nil
	})
	if err != nil || string(res) != "r" || s.completeCtxErr != nil {
		t.Fatalf("Do: %q %v, Complete saw ctx error %v", res, err, s.completeCtxErr)
	}
	if c, _ := mem.Reserve(context.Background(), "k", nil, time.Minute); c.State != keystore.Done {
		t.Fatalf("after Do: %v, want done", c.State)
	}
}

func TestDoReserveError(t *testing.T) {
	_, _, err := keystore.Do(context.Background(), dbtest.MemStore(t), "", nil, func(context.Context) ([]byte, error) {
		t.Error("fn ran")
		return nil, nil
	})
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Do with an empty key: %v", err)
	}
}

type badState struct{ keystore.Store }

func (badState) Reserve(context.Context, string, []byte, time.Duration) (keystore.Claim, error) {
	return keystore.Claim{State: 42}, nil
}

func TestDoUnknownState(t *testing.T) {
	_, _, err := keystore.Do(context.Background(), badState{}, "k", nil, func(context.Context) ([]byte, error) { return nil, nil })
	if err == nil || !strings.Contains(err.Error(), "State(42)") {
		t.Fatalf("Do on a store answering state 42: %v", err)
	}
}

func TestScopeUnsupported(t *testing.T) {
	if _, err := keystore.Scope(badState{}, "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Scope on a store without scopes: %v", err)
	}
}

func TestValidateScope(t *testing.T) {
	for _, ok := range []string{"a", "tenant:42/endpoint:/v1/charges", "ü", strings.Repeat("s", keystore.MaxScopeLen)} {
		if err := keystore.ValidateScope(ok); err != nil {
			t.Errorf("ValidateScope(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "{a}", "a}", "a\x00", "\xff", strings.Repeat("s", keystore.MaxScopeLen+1)} {
		if err := keystore.ValidateScope(bad); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Errorf("ValidateScope(%q): %v", bad, err)
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[keystore.State]string{keystore.Acquired: "acquired", keystore.InProgress: "in_progress", keystore.Done: "done", 0: "State(0)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
}
