package idem

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"

	"github.com/idem-go/idem/internal/uuidtext"
)

// DeriveKey returns a deterministic key for one logical operation, built from
// its business fields, so that every retry of that operation carries the same
// key. A UUID minted on each attempt defeats deduplication entirely; a key
// derived from (namespace, order id, line) does not.
//
// The result is a name-based UUID (RFC 9562 version 5: SHA-1 over a namespace
// and a name) in canonical text form, 36 bytes. The namespace separates
// unrelated kinds of operation ("payments.capture", "orders.create"). Fields
// are length-prefixed before hashing, so ("ab", "c") and ("a", "bc") give
// different keys, and so does any change of field order.
//
// DeriveKey returns an error wrapping [ErrInvalidKey] when namespace is empty
// or no field is given, since such a key would collide across operations.
func DeriveKey(namespace string, fields ...string) (string, error) {
	if namespace == "" {
		return "", fmt.Errorf("%w: DeriveKey needs a namespace", ErrInvalidKey)
	}
	if len(fields) == 0 {
		return "", fmt.Errorf("%w: DeriveKey needs at least one field", ErrInvalidKey)
	}
	h := sha1.New()
	var n [8]byte
	write := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	h.Write(keyNamespace[:])
	write(namespace)
	for _, f := range fields {
		write(f)
	}
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = (u[6] & 0x0f) | 0x50 // version 5
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 9562 variant
	return uuidtext.Format(u), nil
}

// keyNamespace is idem's own UUID namespace, so derived keys never equal a
// version-5 UUID that another system derives from the same name.
var keyNamespace = [16]byte{0x6b, 0x1d, 0x3e, 0x8a, 0x4c, 0x2f, 0x4b, 0x91, 0x9a, 0x0e, 0x5d, 0x77, 0x21, 0xc4, 0x0b, 0xe3}
