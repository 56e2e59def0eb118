package idemgrpc

import (
	"fmt"
	"net/http"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"google.golang.org/grpc/metadata"
)

// Metadata keys idemgrpc reads and writes.
const (
	// MetadataKey is the request metadata entry that carries the key.
	MetadataKey = "idempotency-key"
	// MetadataReplayed is set to "true" in the response header of a replay.
	MetadataReplayed = "idempotent-replayed"
	// MetadataPushback is the trailer by which grpc-go's retry policy learns
	// how many milliseconds to wait before the next attempt (gRFC A6).
	MetadataPushback = "grpc-retry-pushback-ms"
)

// KeyFromMetadata returns the idempotency key of a call's metadata. The
// rules are the HTTP header's, shared with [idemhttp.ParseKey] in lenient
// mode: one entry, either an RFC 9651 String ("abc") or a bare token of
// printable ASCII without spaces, quotes, commas or backslashes, 1 to 255
// characters once unquoted. Errors wrap idem.ErrMissingKey or
// idem.ErrInvalidKey.
func KeyFromMetadata(md metadata.MD) (string, error) {
	vals := md.Get(MetadataKey)
	if len(vals) == 0 {
		return "", fmt.Errorf("idemgrpc: no %s metadata: %w", MetadataKey, idem.ErrMissingKey)
	}
	key, err := idemhttp.ParseKey(http.Header{idemhttp.HeaderKey: vals}, false)
	if err != nil {
		return "", fmt.Errorf("idemgrpc: metadata %q: %w", MetadataKey, err)
	}
	return key, nil
}
