package dynamostore_test

import (
	"testing"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/dynamostore"
	"github.com/idem-go/idem/keystore/storetest"
)

// TestConformance runs the suite on dynalite, which does not return the item
// with a failed condition: conflicts take the store's read-after path.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		c, _ := client(t, "")
		return newStore(t, c, dynamostore.WithClockSkew(0))
	})
}
