package idemkafka_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/internal/testsupport/dbtest"
)

// TestFingerprints: with WithFingerprint, a fingerprint longer than
// idem.MaxFingerprintLen is dead-lettered with reason invalid-fingerprint
// before anything runs, and an id produced again with another payload is
// dead-lettered with reason fingerprint-mismatch; the others apply once.
// Both keyed consumers follow the same rule.
func TestFingerprints(t *testing.T) {
	t.Parallel()
	fingerprint := func(r *kgo.Record) []byte {
		if string(r.Value) == "huge" {
			return []byte(strings.Repeat("x", idem.MaxFingerprintLen+1))
		}
		sum := sha256.Sum256(r.Value)
		return sum[:]
	}
	for _, kind := range []string{"inbox", "keystore"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1)
			p := newProducer(t, client(t, f.c))
			for _, rec := range []struct{ id, value string }{{"a", "a"}, {"b", "huge"}, {"c", "c"}, {"a", "a-changed"}, {"a", "a"}} {
				if err := p.Produce(context.Background(), rec.id, &kgo.Record{Topic: "orders", Value: []byte(rec.value)}); err != nil {
					t.Fatal(err)
				}
			}
			ta := newTally()
			opts := []idemkafka.Option{ta.option(), idemkafka.WithFingerprint(fingerprint), idemkafka.WithDeadLetter("dlq")}
			var mu sync.Mutex
			applied := map[string]int{}
			var con runner
			if kind == "inbox" {
				con = f.consumer(f.eff.handler("1"), opts...)
			} else {
				con = f.keystoreConsumer(dbtest.MemStore(t), func(_ context.Context, r *kgo.Record) error {
					mu.Lock()
					applied[string(r.Value)]++
					mu.Unlock()
					return nil
				}, opts...)
			}
			_ = runUntil(t, con, ta, 5)
			if kind == "inbox" {
				applied = f.eff.counts(t)
			}
			if len(applied) != 2 || applied["a"] != 1 || applied["c"] != 1 {
				t.Errorf("applied %v, want a and c once each", applied)
			}
			ta.want(t, "", map[idem.Outcome]int{idem.Applied: 2, idem.Duplicate: 1, idem.DeadLettered: 2})
			reasons := map[string]string{}
			for _, r := range readTopic(t, f.c, "dlq", 2) {
				reasons[string(r.Value)] = headers(r)[idemkafka.HeaderDLQReason]
			}
			if reasons["huge"] != string(idem.ReasonInvalidFingerprint) || reasons["a-changed"] != string(idem.ReasonFingerprintMismatch) {
				t.Errorf("dead-letter reasons %v", reasons)
			}
			f.requireCommittedToEnd()
		})
	}
}
