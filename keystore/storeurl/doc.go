// Package storeurl opens a key store named by a URL, the forms `idem serve
// --store` accepts: memory, memory:SNAPSHOT-PATH, sqlite:PATH,
// postgres://…, redis://…, redis-cluster://…, nats://… and dynamodb://….
//
// idem serve and the Caddy module (adapters/idemcaddy) both name their
// store this way, through this package, so that they accept exactly the
// same URLs and refuse the same ones with the same errors.
//
// [Parse] checks a URL without opening anything (no I/O), so that a
// configuration can be refused before it starts anything; [Open] opens
// the store it names, creating the SQL stores' tables and the DynamoDB
// table when missing:
//
//	spec, err := storeurl.Parse("sqlite:/var/lib/idem/keys.db")
//	...
//	opened, err := storeurl.Open(ctx, spec, storeurl.Options{})
//	...
//	defer opened.Close()
//	mw, err := idemhttp.New(opened.Store())
//
// The package is a module of its own: it links every backend's client
// (pgx, SQLite, go-redis, nats.go, the AWS SDK), which a program that uses
// one store need not carry.
package storeurl
