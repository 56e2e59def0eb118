package storetest

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// testInspect checks [keystore.Inspector] (Inspect and List change
// nothing, report state, token, expiry, fingerprint and result size, and
// page with filters), the fenced release of an operator by key and token,
// and [keystore.Forgetter].
func testInspect(t *testing.T, s keystore.Store, cfg config) {
	in, ok := optional[keystore.Inspector](t, s, "operators cannot list or inspect its keys")
	if !ok {
		return
	}
	ctx := testCtx(t)
	prefix := newKey("inspect")
	fp := []byte{0xde, 0xad, 0xbe, 0xef}

	_, err := in.Inspect(ctx, prefix+"-absent")
	wantErr(t, "Inspect of an absent key", err, keystore.ErrNotFound)
	_, err = in.Inspect(ctx, "")
	wantErr(t, "Inspect of an empty key", err, idem.ErrInvalidKey)
	for _, bad := range []keystore.ListOptions{{State: keystore.Acquired}, {Limit: -1}, {Limit: keystore.MaxListLimit + 1}} {
		_, _, err := in.List(ctx, bad)
		wantErr(t, "List with bad options", err, idem.ErrInvalidArgument)
	}

	// In progress: the holder's token and lease, the fingerprint.
	held := reserve(t, s, prefix+"-held", fp, long)
	info, err := in.Inspect(ctx, held.Key)
	noErr(t, "Inspect", err)
	if info.Key != held.Key || info.State != keystore.InProgress || info.Token != held.Token ||
		info.Fingerprint != hex.EncodeToString(fp) || !near(info.Expires, held.Expires, 5*time.Second) {
		t.Fatalf("Inspect of a held key: %+v, want in_progress, token %d, fingerprint %x, expires about %v", info, held.Token, fp, held.Expires)
	}
	wantState(t, reserve(t, s, held.Key, nil, long), keystore.InProgress) // Inspect took nothing

	// Done: result size, fingerprint kept, the completing token or 0.
	done := reserve(t, s, prefix+"-done", fp, long)
	noErr(t, "Complete", s.Complete(ctx, done, []byte("result"), long))
	info, err = in.Inspect(ctx, done.Key)
	noErr(t, "Inspect", err)
	if info.State != keystore.Done || info.ResultSize != len("result") || string(info.Result) != "result" || info.Fingerprint != hex.EncodeToString(fp) ||
		(info.Token != 0 && info.Token != done.Token) || !near(info.Expires, time.Now().Add(long), 5*time.Second) {
		t.Fatalf("Inspect of a done key: %+v, want done, result \"result\", fingerprint %x, token %d or 0", info, fp, done.Token)
	}

	// A lapsed lease is still visible (or already gone), and inspecting it
	// does not take it over.
	lapsed := reserve(t, s, prefix+"-lapsed", nil, cfg.unit)
	time.Sleep(cfg.unit * 5 / 2)
	info, err = in.Inspect(ctx, lapsed.Key)
	switch {
	case errors.Is(err, keystore.ErrNotFound):
	case err != nil:
		t.Fatalf("Inspect of a lapsed lease: %v", err)
	case !info.Lapsed(time.Now().Add(time.Second)) || info.Token != lapsed.Token:
		t.Fatalf("Inspect of a lapsed lease: %+v, want in_progress with Expires past, token %d", info, lapsed.Token)
	}
	wantState(t, reserve(t, s, lapsed.Key, nil, long), keystore.Acquired)

	// List: filters, pages, finds each key once.
	var inProgress, finished []string
	for i := range 5 {
		c := reserve(t, s, prefix+"-list-"+string(rune('a'+i)), nil, long)
		if i%2 == 0 {
			noErr(t, "Complete", s.Complete(ctx, c, []byte("x"), long))
			finished = append(finished, c.Key)
		} else {
			inProgress = append(inProgress, c.Key)
		}
	}
	released := reserve(t, s, prefix+"-list-released", nil, long)
	noErr(t, "Release", s.Release(ctx, released))
	listed := func(state keystore.State) map[string]keystore.KeyInfo {
		t.Helper()
		got := map[string]keystore.KeyInfo{}
		after := ""
		for page := 0; ; page++ {
			if page > 10000 {
				t.Fatal("List did not end after 10000 pages")
			}
			keys, next, err := in.List(ctx, keystore.ListOptions{State: state, After: after, Limit: 2})
			noErr(t, "List", err)
			if len(keys) > 2 {
				t.Fatalf("List with limit 2 returned %d keys", len(keys))
			}
			for _, k := range keys {
				if state != 0 && k.State != state {
					t.Fatalf("List(state %v) returned %+v", state, k)
				}
				if strings.HasPrefix(k.Key, prefix+"-list-") {
					got[k.Key] = k
				}
			}
			if next == "" {
				return got
			}
			after = next
		}
	}
	check := func(state keystore.State, want []string) {
		t.Helper()
		got := listed(state)
		if len(got) != len(want) {
			t.Fatalf("List(state %v) found %d of the test's keys (%v), want %v", state, len(got), got, want)
		}
		for _, k := range want {
			if _, ok := got[k]; !ok {
				t.Fatalf("List(state %v) misses %q: %v", state, k, got)
			}
		}
	}
	check(keystore.InProgress, inProgress)
	check(keystore.Done, finished)
	check(0, append(append([]string{}, inProgress...), finished...))

	// An operator's fenced release: a stale token changes nothing, the
	// holder's frees the key.
	key := prefix + "-operator"
	old := reserve(t, s, key, nil, long)
	noErr(t, "Release", s.Release(ctx, old))
	cur := reserve(t, s, key, nil, long)
	wantErr(t, "release with a stale token", keystore.ReleaseToken(ctx, s, key, old.Token), keystore.ErrLeaseLost)
	info, err = in.Inspect(ctx, key)
	noErr(t, "Inspect", err)
	if info.State != keystore.InProgress || info.Token != cur.Token {
		t.Fatalf("after a stale release: %+v, want the holder's lease (token %d) untouched", info, cur.Token)
	}
	noErr(t, "release with the holder's token", keystore.ReleaseToken(ctx, s, key, info.Token))
	_, err = in.Inspect(ctx, key)
	wantErr(t, "Inspect after the operator's release", err, keystore.ErrNotFound)
	wantState(t, reserve(t, s, key, nil, long), keystore.Acquired)

	testForget(t, s, prefix)
}

func testForget(t *testing.T, s keystore.Store, prefix string) {
	f, ok := optional[keystore.Forgetter](t, s, "operators cannot forget its keys")
	if !ok {
		return
	}
	ctx := testCtx(t)
	key := prefix + "-forget"
	c := reserve(t, s, key, nil, long)
	wantErr(t, "Forget of an in-progress key", f.Forget(ctx, key), keystore.ErrInProgress)
	wantState(t, reserve(t, s, key, nil, long), keystore.InProgress)
	noErr(t, "Complete", s.Complete(ctx, c, []byte("x"), long))
	noErr(t, "Forget", f.Forget(ctx, key))
	wantErr(t, "Forget again", f.Forget(ctx, key), keystore.ErrNotFound)
	next := reserve(t, s, key, nil, long)
	wantState(t, next, keystore.Acquired)
	if next.Token <= c.Token {
		t.Fatalf("token %d after Forget, want above %d", next.Token, c.Token)
	}
	wantErr(t, "Forget of an empty key", f.Forget(context.Background(), ""), idem.ErrInvalidKey)
}

// optional returns s as the optional interface T (see keystore.As), and
// logs what its users lose when s does not implement it.
func optional[T any](t *testing.T, s keystore.Store, without string) (T, bool) {
	v, ok := keystore.As[T](s)
	if !ok {
		t.Logf("%T does not implement %T (or wraps a store that does not): %s", s, (*T)(nil), without)
	}
	return v, ok
}
