package keystore_test

import (
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/storetest"
)

// newLeaseStore is a store that renews leases.
func newLeaseStore() *storetest.RefStore { return storetest.NewRefStore() }

// noExtend hides a store's Extend: a store that cannot renew leases.
type noExtend struct{ keystore.Store }
