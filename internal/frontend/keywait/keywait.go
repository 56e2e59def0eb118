// Package keywait is how idemhttp and idemgrpc wait for a key another
// request holds in progress: one schedule for both front ends.
package keywait

import (
	"time"

	"github.com/idem-go/idem/keystore"
)

// Wait is the keystore.Await schedule of a front end configured with
// storeTimeout and wait (WithWait): each Reserve is bounded by storeTimeout;
// with wait > 0, a key in progress is polled from 10ms up to 250ms with
// jitter for up to wait, and with wait 0 it is not waited for.
func Wait(storeTimeout, wait time.Duration) keystore.Wait {
	w := keystore.Wait{CallTimeout: storeTimeout}
	if wait > 0 {
		w.Min, w.Max, w.Timeout = 10*time.Millisecond, 250*time.Millisecond, wait
	}
	return w
}
