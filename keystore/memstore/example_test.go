package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
)

// The Reserve → effect → Complete protocol by hand, on a store bounded to
// 10,000 keys.
func Example() {
	ctx := context.Background()
	store, err := memstore.New(memstore.WithMaxKeys(10_000))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	c, err := store.Reserve(ctx, "email:welcome:user-42", nil, 30*time.Second)
	if err != nil {
		panic(err) // fail closed: do not send, do not acknowledge
	}
	fmt.Println("first delivery:", c.State)
	// ... send the email, with the key as its Message-ID ...
	if err := store.Complete(ctx, c, []byte("sent"), 24*time.Hour); err != nil {
		panic(err)
	}

	again, err := store.Reserve(ctx, "email:welcome:user-42", nil, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("redelivery: %v, result %q\n", again.State, again.Result)

	// A stale claim cannot write.
	err = store.Complete(ctx, c, []byte("other"), time.Hour)
	fmt.Println("second Complete of the same claim:", err)
	c.Token++
	err = store.Complete(ctx, c, []byte("forged"), time.Hour)
	fmt.Println("Complete with another token is lease lost:", errors.Is(err, keystore.ErrLeaseLost))
	// Output:
	// first delivery: acquired
	// redelivery: done, result "sent"
	// second Complete of the same claim: <nil>
	// Complete with another token is lease lost: true
}

// A store that keeps its keys across a restart: load the last snapshot at
// start (none on the first run), save one on shutdown.
func ExampleLoad() {
	ctx := context.Background()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("idem-example-%d.snap", os.Getpid()))
	defer os.Remove(path)

	open := func() *memstore.Store {
		store, err := memstore.Load(path)
		if errors.Is(err, fs.ErrNotExist) {
			store, err = memstore.New()
		}
		if err != nil {
			panic(err) // a corrupt snapshot: refuse to start rather than forget keys
		}
		return store
	}

	store := open()
	c, err := store.Reserve(ctx, "payment:7", nil, 30*time.Second)
	if err != nil {
		panic(err)
	}
	if err := store.Complete(ctx, c, nil, 24*time.Hour); err != nil {
		panic(err)
	}
	if err := store.SaveSnapshot(path); err != nil { // on shutdown
		panic(err)
	}
	store.Close()

	store = open() // the next process
	defer store.Close()
	again, err := store.Reserve(ctx, "payment:7", nil, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("after the restart:", again.State)
	// Output:
	// after the restart: done
}

// A consumer's seen-set for a day of keys at a known rate, sized up front:
// keystore.Do with a nil result completes each key into the compact tier,
// whose indexes are allocated once, for the whole day's keys.
func ExampleWithCapacity() {
	ctx := context.Background()
	const perDay = 1_000_000
	store, err := memstore.New(memstore.WithCapacity(perDay), memstore.WithMaxKeys(2*perDay))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	for _, key := range []string{"msg-1", "msg-2", "msg-1"} {
		_, _, err := keystore.Do(ctx, store, key, nil, func(context.Context) ([]byte, error) {
			fmt.Println("processing", key)
			return nil, nil
		}, keystore.WithTTL(24*time.Hour))
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// processing msg-1
	// processing msg-2
}
