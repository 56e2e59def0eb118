package idemcaddy

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Quota bounds what the clients of one idempotency handler may keep in
// the store (see idemhttp.Quota): key counts, and stored response bytes
// as a number or a size with a unit ("10MiB"). An omitted field is
// unbounded; PrincipalKeys or Keys is required. A refused request is
// answered 429 quota-exceeded with Retry-After before the upstream is
// called. The accounting starts empty with each configuration Caddy loads.
type Quota struct {
	// PrincipalKeys is how many keys one principal may hold.
	PrincipalKeys QuotaValue `json:"principal_keys,omitempty"`
	// PrincipalBytes is how many stored response bytes one principal may
	// hold.
	PrincipalBytes QuotaValue `json:"principal_bytes,omitempty"`
	// Keys is how many keys all principals together may hold.
	Keys QuotaValue `json:"keys,omitempty"`
	// Bytes is how many stored response bytes all principals together may
	// hold.
	Bytes QuotaValue `json:"bytes,omitempty"`
}

// QuotaValue is a count or a size as written: the JSON takes a number
// (100, 1048576) or a string ("10MiB").
type QuotaValue string

// UnmarshalJSON implements json.Unmarshaler: a number or a string.
func (v *QuotaValue) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = QuotaValue(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("idempotency: quota: %s is neither a number nor a size such as \"10MiB\"", strings.TrimSpace(string(b)))
	}
	*v = QuotaValue(n.String())
	return nil
}
