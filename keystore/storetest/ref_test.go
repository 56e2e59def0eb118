package storetest_test

import (
	"testing"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// The reference store passes the suite it is the reference of.
func TestRefStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) keystore.Store { return storetest.NewRefStore() })
}
