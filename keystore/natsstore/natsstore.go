package natsstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/keystore"
)

// DefaultBucket is the key-value bucket a store uses unless WithBucket
// says otherwise.
const DefaultBucket = "idem"

// Option configures [New]. An option given a bad value makes New return an
// error wrapping idem.ErrInvalidOption.
type Option func(*config) error

type config struct {
	bucket    string
	replicas  int
	scope     string
	maxResult int
	timeout   time.Duration
	storage   jetstream.StorageType
}

// WithBucket sets the key-value bucket's name (default [DefaultBucket]).
// New creates it if it does not exist.
func WithBucket(name string) Option {
	return func(c *config) error {
		if name == "" || len(name) > 64 {
			return fmt.Errorf("natsstore: bucket name %q: want 1 to 64 characters: %w", name, idem.ErrInvalidOption)
		}
		for _, r := range name {
			if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return fmt.Errorf("natsstore: bucket name %q: want only A-Z a-z 0-9 - _: %w", name, idem.ErrInvalidOption)
			}
		}
		c.bucket = name
		return nil
	}
}

// WithReplicas sets how many servers hold the bucket (default 1; 3 or 5
// for a store that survives the loss of a server). It applies when New
// creates the bucket, and updates an existing bucket's replica count.
func WithReplicas(n int) Option {
	return option.Check("natsstore", n >= 1 && n <= 5, func(c *config) { c.replicas = n }, "replicas %d: want 1 to 5", n)
}

// WithScope sets the scope of the store's keys (default
// keystore.DefaultScope). See also [Store.Scope].
func WithScope(name string) Option {
	return option.Valid("natsstore", keystore.ValidateScope(name), func(c *config) { c.scope = name })
}

// WithMaxResultSize sets the largest result Complete accepts (default: 1
// MiB or, if smaller, the server's max_payload less 4 KiB for the record's
// other fields and headers). Larger than the server's max_payload cannot
// be stored and is refused.
func WithMaxResultSize(n int) Option {
	return option.Check("natsstore", n >= 0, func(c *config) { c.maxResult = n }, "max result size %d is negative", n)
}

// WithTimeout bounds each request to the servers (default 5 s): a publish
// that gets no ack within it is sent once more (deduplicated by its
// message id), then the call fails. A leader election takes a few
// seconds; calls during it fail and the caller retries.
func WithTimeout(d time.Duration) Option {
	return option.Check("natsstore", d > 0 && d <= keystore.CallTimeout, func(c *config) { c.timeout = d }, "timeout %v: want (0, %v]", d, keystore.CallTimeout)
}

// WithMemoryStorage keeps the bucket in memory instead of files (when New
// creates it): faster, lost when all its servers restart.
func WithMemoryStorage() Option {
	return func(c *config) error { c.storage = jetstream.MemoryStorage; return nil }
}

// Store is a [keystore.Store] on a JetStream key-value bucket. See the
// package documentation.
type Store struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	stream    string // KV_BUCKET
	apiPrefix string // $JS.API.
	subjects  string // $KV.BUCKET.SCOPE.
	scope     string
	maxResult int
	timeout   time.Duration
	watch     *watchers // waiters' subscriptions (notify.go)
	// refusePublish, set by tests only, makes a publish to subject fail as
	// a fenced write refused by the server, without sending it.
	refusePublish func(subject string) bool
}

// The lease message's grace period after its lease, so that a successor
// learns it is a takeover: the lease again, at least a minute.
const minGrace = time.Minute

// New binds a store to the bucket (creating it, or updating its replica
// count, as the options say) on js, which must not use a JetStream domain
// or API prefix. The store does not own js's connection and never closes
// it. Bad options return an error wrapping idem.ErrInvalidOption; a bucket
// that cannot be created returns the server's error.
func New(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Store, error) {
	cfg := config{bucket: DefaultBucket, replicas: 1, scope: keystore.DefaultScope, maxResult: -1, timeout: 5 * time.Second, storage: jetstream.FileStorage}
	if js == nil {
		return nil, fmt.Errorf("natsstore: nil JetStream: %w", idem.ErrInvalidOption)
	}
	if err := option.Apply("natsstore", &cfg, opts); err != nil {
		return nil, err
	}
	nc := js.Conn()
	limit := int(nc.MaxPayload()) - 4096
	switch {
	case cfg.maxResult < 0:
		cfg.maxResult = min(keystore.DefaultMaxResultSize, limit)
	case cfg.maxResult > limit:
		return nil, fmt.Errorf("natsstore: max result size %d exceeds the server's max_payload %d less 4 KiB: %w", cfg.maxResult, nc.MaxPayload(), idem.ErrInvalidOption)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("natsstore: %w", err)
	}
	_, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:   cfg.bucket,
		History:  1,
		Replicas: cfg.replicas,
		Storage:  cfg.storage,
		// Per-message TTLs need it; markers of expired keys live 1 s.
		LimitMarkerTTL: time.Second,
		Description:    "idem key store (keystore/natsstore)",
	})
	if err != nil {
		return nil, fmt.Errorf("natsstore: bucket %s: %w", cfg.bucket, err)
	}
	s := &Store{nc: nc, js: js, stream: "KV_" + cfg.bucket, apiPrefix: "$JS.API.", maxResult: cfg.maxResult, timeout: cfg.timeout, watch: &watchers{}}
	s.subjects = "$KV." + cfg.bucket + "." + b64(cfg.scope) + "."
	s.scope = cfg.scope
	return s, nil
}

// callID is a fresh message id for one call's publish: JetStream
// deduplicates the call's own retry, never another call.
func callID(op string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return op + hex.EncodeToString(b[:])
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// Scope returns a view of the same bucket in which keys live in the scope
// name (a subject token of its own). It implements [keystore.Scoper].
func (s *Store) Scope(name string) (keystore.Store, error) {
	if err := keystore.ValidateScope(name); err != nil {
		return nil, fmt.Errorf("natsstore: %w", err)
	}
	v := *s
	v.scope = name
	v.subjects = s.subjects[:len(s.subjects)-len(b64(s.scope))-1] + b64(name) + "."
	return &v, nil
}

// MaxResultSize returns the largest result Complete accepts.
func (s *Store) MaxResultSize() int { return s.maxResult }

// Subject returns the stream subject that holds key, for operators and
// tests.
func (s *Store) Subject(key string) string { return s.subjects + b64(key) }

// roundUpSecond is d in whole seconds, at least one: the unit of Nats-TTL.
func roundUpSecond(d time.Duration) time.Duration {
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}

// roundUpMilli is a lease in whole milliseconds, at least one.
func roundUpMilli(d time.Duration) time.Duration {
	return max(time.Millisecond, (d+time.Millisecond-1)/time.Millisecond*time.Millisecond)
}

// begin starts a store call op (reserve, complete, …): it returns valid,
// the call's argument check, if it failed, or ctx's error if ctx is done;
// otherwise the detached context the call runs in ([keystore.Detach]: a
// call that has begun is not cut off half-way) and its cancel.
func begin(ctx context.Context, op string, valid error) (context.Context, context.CancelFunc, error) {
	if valid != nil {
		return nil, nil, valid
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("natsstore: %s: %w", op, err)
	}
	dctx, cancel := keystore.Detach(ctx)
	return dctx, cancel, nil
}

// leaseTTL returns lease as Reserve and Extend hold it (capped, in whole
// milliseconds) and the Nats-TTL of the message that holds it: the lease
// and its grace period ([minGrace]).
func leaseTTL(lease time.Duration) (held, ttl time.Duration) {
	held = roundUpMilli(keystore.CapDuration(lease))
	return held, roundUpSecond(held + max(held, minGrace))
}

// Reserve implements [keystore.Store.Reserve]. A new key costs one publish
// (put-if-absent); a key that exists costs a read from the stream leader
// too, and an expired lease also a read of the leader's clock and a
// compare-and-set publish (the takeover). The lease ends by the server's
// clock; the Expires of an Acquired or InProgress claim is the holder's
// estimate (its clock plus the lease: the server's timestamp is not in the
// publish ack), a hint for Retry-After. A Done claim's Expires is by the
// server's clock.
//
// Cancel and crash: after the ctx check the call runs detached
// ([keystore.Detach]); if it fails after its publish may have landed, the
// lease (nobody's) expires after the lease and its grace; a retry by the
// same call is recognised by its nonce.
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	dctx, cancel, err := begin(ctx, "reserve", keystore.ValidateReserve(key, fp, lease))
	if err != nil {
		return keystore.Claim{}, err
	}
	defer cancel()
	lease, ttl := leaseTTL(lease)
	nonce := make([]byte, nonceLen)
	_, _ = rand.Read(nonce)
	subject := s.Subject(key)
	end := time.UnixMicro(time.Now().Add(lease).UnixMicro())
	data := encodeLease(lease, end, fp, nonce)
	var expect uint64 // 0: the subject must have no message
	takeover := false
	for attempt := 0; attempt < 8; attempt++ {
		id := hex.EncodeToString(nonce) + "-" + strconv.Itoa(attempt)
		seq, err := s.publish(dctx, subject, data, expect, ttl, id, nil)
		if err == nil {
			return keystore.Claim{Key: key, State: keystore.Acquired, Token: seq, Expires: end, Takeover: takeover}, nil
		}
		if !errors.Is(err, errConflict) {
			return keystore.Claim{}, fmt.Errorf("natsstore: reserve: %w", err)
		}
		st, ok, err := s.get(dctx, subject)
		switch {
		case err != nil:
			return keystore.Claim{}, fmt.Errorf("natsstore: reserve: %w", err)
		case !ok:
			if expect == 0 {
				settle(attempt) // a write not yet applied on the leader
			}
			expect, takeover = 0, false
			continue
		case st.marker:
			if expect == st.seq {
				settle(attempt)
			}
			expect, takeover = st.seq, false
			continue
		case !st.rec.done && bytes.Equal(st.rec.nonce, nonce): // our own publish, whose ack was lost
			return keystore.Claim{Key: key, State: keystore.Acquired, Token: st.leaseToken(), Expires: st.rec.end, Takeover: takeover}, nil
		case idem.FingerprintsConflict(st.rec.fp, fp):
			// A live key's fingerprint; an expired lease's is checked only
			// after its expiry is known, below.
			if st.rec.done {
				return keystore.Claim{}, keystore.MismatchError(key)
			}
		}
		if st.rec.done {
			return keystore.Claim{Key: key, State: keystore.Done, Expires: st.time.Add(st.rec.dur), Result: st.rec.result}, nil
		}
		now, err := s.clock(dctx)
		if err != nil {
			return keystore.Claim{}, fmt.Errorf("natsstore: reserve: %w", err)
		}
		if st.time.Add(st.rec.dur).After(now) {
			if idem.FingerprintsConflict(st.rec.fp, fp) {
				return keystore.Claim{}, keystore.MismatchError(key)
			}
			return keystore.Claim{Key: key, State: keystore.InProgress, Expires: st.rec.end}, nil
		}
		expect, takeover = st.seq, true // expired: take it over, fenced on its revision
	}
	return keystore.Claim{}, fmt.Errorf("natsstore: reserve %q: the key kept changing under 8 attempts", key)
}

// Complete implements [keystore.Store.Complete]: a read of the lease (for
// its fingerprint) and one publish of the result, fenced on the claim's token (the key's revision when it was
// reserved) and expiring after ttl rounded up to whole seconds, counted by
// the server. A repeated Complete of the same claim returns nil and keeps
// the first result.
//
// Crash: if the process dies before the publish lands, the key stays in
// progress until its lease ends. If the ack is lost, the publish is sent
// again with the same message id and deduplicated by the server.
func (s *Store) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	dctx, cancel, err := begin(ctx, "complete", keystore.ValidateComplete(c, result, ttl, s.maxResult))
	if err != nil {
		return err
	}
	defer cancel()
	subject := s.Subject(c.Key)
	// The result keeps the lease's fingerprint, which the claim does not
	// carry: read it from the lease (a read from the leader, then the
	// fenced publish; two round trips).
	fp, expect, err := s.leaseFingerprint(dctx, subject, c.Token)
	if err != nil {
		return err
	}
	ttl = roundUpSecond(keystore.CapDuration(ttl))
	id := callID("c")
	var u unsettled
	for renewals := 0; ; {
		_, err = s.publish(dctx, subject, encodeDone(c.Token, ttl, fp, result), expect, ttl, id, nil)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errConflict) {
			return fmt.Errorf("natsstore: complete: %w", err)
		}
		st, ok, err := s.settled(dctx, subject, expect)
		if err != nil {
			return fmt.Errorf("natsstore: complete: %w", err)
		}
		if ok && !st.marker && st.rec.done && st.rec.token == c.Token {
			return nil // completed by this claim: this call's first try, or an earlier call
		}
		if !ok || !st.heldBy(c.Token) {
			return keystore.LeaseLostError("complete", c.Key, c.Token)
		}
		if st.seq == expect {
			// Refused, yet the lease is unchanged and still the claim's:
			// a write to the key is still in flight on the stream (this
			// call's own first try, whose ack timed out). The lease is not
			// lost: send the same message again (the server deduplicates
			// it by id) until the key settles.
			if err := u.wait(s.timeout); err != nil {
				return fmt.Errorf("natsstore: complete %q: %w", c.Key, err)
			}
			continue
		}
		if renewals++; renewals > 3 {
			return keystore.LeaseLostError("complete", c.Key, c.Token)
		}
		expect = st.seq // still the claim's lease, renewed meanwhile
	}
}

// errUnsettled: a fenced write kept being refused while the key still
// held the revision it was fenced on, for longer than the store's request
// timeout. The write may still land; the lease was not lost.
var errUnsettled = errors.New("natsstore: a write to the key is still in flight on the stream; the outcome is unknown")

// unsettled bounds how long a fenced write is sent again while the key is
// unchanged: one request timeout from the first refusal.
type unsettled struct{ since time.Time }

func (u *unsettled) wait(timeout time.Duration) error {
	if u.since.IsZero() {
		u.since = time.Now()
	}
	if time.Since(u.since) > timeout {
		return fmt.Errorf("refused for %v: %w", timeout, errUnsettled)
	}
	time.Sleep(50 * time.Millisecond)
	return nil
}

// settled reads subject's latest message after a publish fenced on
// revision rev failed, waiting (up to about a second) while rev is still
// the latest: the conflict was then with a write not yet applied on the
// leader, such as this call's own first try whose ack was lost.
func (s *Store) settled(ctx context.Context, subject string, rev uint64) (stored, bool, error) {
	for attempt := 0; ; attempt++ {
		st, ok, err := s.get(ctx, subject)
		if err != nil || !ok || st.seq != rev || attempt == 10 {
			return st, ok, err
		}
		settle(attempt)
	}
}

// settle sleeps a little longer after each attempt: 10, 20, … 100 ms.
func settle(attempt int) { time.Sleep(time.Duration(min(attempt+1, 10)) * 10 * time.Millisecond) }

// leaseFingerprint reads the claim's lease record for its fingerprint and
// the revision to fence the write on (the lease's, or its latest
// renewal's); when the key is no longer the claim's lease (or was
// completed by the claim already) it returns nil and token: the fenced
// publish that follows then fails and the read after it decides.
func (s *Store) leaseFingerprint(ctx context.Context, subject string, token uint64) ([]byte, uint64, error) {
	st, ok, err := s.get(ctx, subject)
	if err != nil {
		return nil, 0, fmt.Errorf("natsstore: complete: %w", err)
	}
	if !ok || !st.heldBy(token) {
		return nil, token, nil
	}
	return st.rec.fp, st.seq, nil
}

// Release implements [keystore.Store.Release]: one publish of a delete
// marker, fenced on the claim's token, that expires after a second. If
// its ack is lost, the retry is deduplicated by its message id, or finds
// the marker with this call's id.
func (s *Store) Release(ctx context.Context, c keystore.Claim) error {
	dctx, cancel, err := begin(ctx, "release", keystore.ValidateRelease(c))
	if err != nil {
		return err
	}
	defer cancel()
	id := callID("r")
	h := nats.Header{"KV-Operation": []string{"DEL"}, releaseHeader: []string{id}}
	subject := s.Subject(c.Key)
	expect := c.Token
	var u unsettled
	for attempt := 0; ; {
		_, err := s.publish(dctx, subject, nil, expect, time.Second, id, h)
		if errors.Is(err, errConflict) {
			st, ok, gerr := s.settled(dctx, subject, expect)
			if gerr != nil {
				return fmt.Errorf("natsstore: release: %w", gerr)
			}
			if ok && st.marker && st.release == id {
				return nil // this call's first try landed (its ack was lost)
			}
			if ok && st.heldBy(c.Token) && st.seq == expect {
				// Unchanged and still held: a write is in flight (see
				// Complete). Send the same message again.
				if err := u.wait(s.timeout); err != nil {
					return fmt.Errorf("natsstore: release %q: %w", c.Key, err)
				}
				continue
			}
			if attempt++; ok && st.heldBy(c.Token) && attempt <= 3 {
				expect = st.seq // the claim's lease, renewed: fence on the renewal
				continue
			}
			return keystore.LeaseLostError("release", c.Key, c.Token)
		}
		if err != nil {
			return fmt.Errorf("natsstore: release: %w", err)
		}
		return nil
	}
}
