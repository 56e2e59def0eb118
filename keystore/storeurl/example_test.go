package storeurl_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idem-go/idem/keystore/storeurl"
)

// Open a store named by a URL, as `idem serve --store` and the Caddy
// module do: a memory store, then a SQLite file (its table is created).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "storeurl")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, u := range []string{"memory", "sqlite:" + filepath.Join(dir, "keys.db")} {
		spec, err := storeurl.Parse(u)
		if err != nil {
			log.Fatal(err)
		}
		opened, err := storeurl.Open(ctx, spec, storeurl.Options{})
		if err != nil {
			log.Fatal(err)
		}
		// Check: the store answers and its table exists.
		fmt.Println(spec.Kind, opened.Check(ctx))
		if err := opened.Close(); err != nil {
			log.Fatal(err)
		}
	}
	_, err = storeurl.Parse("mysql://db/idem")
	fmt.Println(err != nil)
	// Output:
	// memory <nil>
	// sqlite <nil>
	// true
}

// A memory store bounded by its URL: it refuses results past 64 MiB in
// all rather than growing the process.
func ExampleMemoryOptions() {
	spec, err := storeurl.Parse("memory?max-bytes=64MiB&max-keys=100000")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(spec.Kind, spec.Memory.MaxBytes, spec.Memory.MaxKeys)
	_, err = storeurl.Parse("memory?max-bytes=64XB")
	fmt.Println(err)
	// Output:
	// memory 67108864 100000
	// invalid store URL "memory?max-bytes=64XB": max-bytes: "64XB": unknown unit "XB" (want B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)
}
