// Package storeurl opens a key store named by a URL, the forms `idem serve
// --store` accepts: memory, sqlite:PATH, postgres://, redis://,
// redis-cluster://, nats:// and dynamodb://.
package storeurl
