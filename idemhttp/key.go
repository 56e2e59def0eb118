package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/dunglas/httpsfv"
	"github.com/idem-go/idem"
)

// HeaderKey is the request header that carries the key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed marks a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

var errRepeatedKey = errors.New("the Idempotency-Key header appears more than once")

// ParseKey extracts the idempotency key from h. Its errors wrap
// idem.ErrMissingKey when the header is absent, and idem.ErrInvalidKey when
// it is repeated or malformed.
//
// The draft defines the header as an RFC 9651 Structured Field String:
// `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`. With strict
// false, a bare value of printable ASCII without spaces, quotes or commas is
// accepted too (`Idempotency-Key: 8e03978e-...`), since most SDKs send that.
// Parameters on the item are ignored. The key must be 1 to 255 characters.
func ParseKey(h http.Header, strict bool) (string, error) {
	vals := h.Values(HeaderKey)
	switch len(vals) {
	case 0:
		return "", fmt.Errorf("idemhttp: no %s header: %w", HeaderKey, idem.ErrMissingKey)
	case 1:
	default:
		return "", fmt.Errorf("idemhttp: %v: %w", errRepeatedKey, idem.ErrInvalidKey)
	}
	v := strings.Trim(vals[0], " \t")
	var key string
	if strings.HasPrefix(v, `"`) || strict {
		item, err := httpsfv.UnmarshalItem([]string{v})
		if err != nil {
			return "", fmt.Errorf("idemhttp: not a Structured Field String: %v: %w", err, idem.ErrInvalidKey)
		}
		s, ok := item.Value.(string)
		if !ok {
			return "", fmt.Errorf("idemhttp: a Structured Field String is required, got %T: %w", item.Value, idem.ErrInvalidKey)
		}
		key = s
	} else {
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c <= 0x20 || c >= 0x7f || c == '"' || c == ',' || c == '\\' {
				return "", fmt.Errorf("idemhttp: byte %#02x at %d is not allowed in a bare key (printable ASCII without spaces, quotes, commas or backslashes): %w", c, i, idem.ErrInvalidKey)
			}
		}
		key = v
	}
	if key == "" {
		return "", fmt.Errorf("idemhttp: the key is empty: %w", idem.ErrInvalidKey)
	}
	if len(key) > idem.MaxKeyLen {
		return "", fmt.Errorf("idemhttp: the key is %d characters, longer than %d: %w", len(key), idem.MaxKeyLen, idem.ErrInvalidKey)
	}
	return key, nil
}
