package keywait

import (
	"testing"
	"time"

	"github.com/idem-go/idem/keystore"
)

func TestWait(t *testing.T) {
	if got, want := Wait(5*time.Second, 0), (keystore.Wait{CallTimeout: 5 * time.Second}); got != want {
		t.Errorf("Wait(5s, 0) = %+v, want %+v", got, want)
	}
	want := keystore.Wait{Min: 10 * time.Millisecond, Max: 250 * time.Millisecond, Timeout: 2 * time.Second, CallTimeout: time.Second}
	if got := Wait(time.Second, 2*time.Second); got != want {
		t.Errorf("Wait(1s, 2s) = %+v, want %+v", got, want)
	}
}
