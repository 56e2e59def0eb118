// Package uuidtext writes 16 bytes in the canonical text form of a UUID
// (RFC 9562: 8-4-4-4-12 lowercase hex digits), without a third-party
// module in the core's import graph.
package uuidtext

import "encoding/hex"

// Format returns u as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func Format(u [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}
