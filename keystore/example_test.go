package keystore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// payments stands in for a payment provider that, like Stripe, deduplicates
// requests by an Idempotency-Key.
type payments struct{ charges map[string]string }

func (p *payments) charge(_ context.Context, idempotencyKey string, cents int) (string, error) {
	if id, ok := p.charges[idempotencyKey]; ok {
		return id, nil // the provider's own replay
	}
	id := fmt.Sprintf("ch_%d", len(p.charges)+1)
	p.charges[idempotencyKey] = id
	fmt.Printf("provider: charged %d cents as %s\n", cents, id)
	return id, nil
}

// Charging a card once per order, however often the order message is
// delivered.
func ExampleDo() {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	provider := &payments{charges: map[string]string{}}

	// The key is derived from the business operation, so every redelivery
	// of the message carries the same one.
	key, err := idem.DeriveKey("payments.charge", "order-1001")
	if err != nil {
		panic(err)
	}
	for delivery := 1; delivery <= 3; delivery++ {
		res, replayed, err := keystore.Do(ctx, store, key, []byte("amount=2599"), func(ctx context.Context) ([]byte, error) {
			// Pass the key downstream: if this process dies after the charge
			// and before Complete, the retry after the lease is absorbed by
			// the provider.
			id, err := provider.charge(ctx, key, 2599)
			return []byte(id), err
		}, keystore.WithLease(30*time.Second), keystore.WithTTL(72*time.Hour))
		if err != nil {
			fmt.Println("error:", err) // not acknowledged: the broker redelivers
			continue
		}
		fmt.Printf("delivery %d: charge %s, replayed %v\n", delivery, res, replayed)
	}
	// Output:
	// provider: charged 2599 cents as ch_1
	// delivery 1: charge ch_1, replayed false
	// delivery 2: charge ch_1, replayed true
	// delivery 3: charge ch_1, replayed true
}
