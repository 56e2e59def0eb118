package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// The problem types, each an anchor of docs/http.md.
const (
	probMissingKey  = "missing-key"
	probInvalidKey  = "invalid-key"
	probInProgress  = "in-progress"
	probMismatch    = "key-reused"
	probTooLarge    = "request-too-large"
	probNotStored   = "response-not-stored"
	probStore       = "store-unavailable"
	probBadScope    = "invalid-scope"
	probCorrupt     = "stored-response-corrupt"
	probUpstream    = "upstream-unreachable"
	probNoPrincipal = "no-principal"
	probLost        = "response-lost"
	probBusy        = "busy"
	probTimeout     = "request-timeout"
	probBodyRead    = "request-body-incomplete"
	probNotMigrated = "store-not-migrated"
	probLeaseLost   = "lease-lost"
	probBadJSON     = "invalid-json-body"
	probQuota       = "quota-exceeded"
)

var problemTitles = map[string]string{
	probMissingKey:  "Idempotency-Key header is required",
	probInvalidKey:  "Idempotency-Key header is invalid",
	probInProgress:  "A request with this Idempotency-Key is still being processed",
	probMismatch:    "Idempotency-Key was already used with a different request",
	probTooLarge:    "Request body is too large",
	probNotStored:   "The original response was delivered but not stored",
	probStore:       "The idempotency store is unavailable",
	probBadScope:    "The request's principal could not be determined",
	probCorrupt:     "The stored response could not be read",
	probUpstream:    "The upstream server could not be reached",
	probNoPrincipal: "The request does not identify its principal",
	probLost:        "The request was executed but its response was lost",
	probBusy:        "The server is holding too many request bodies",
	probTimeout:     "The request body did not arrive in time",
	probBodyRead:    "The request body could not be read",
	probNotMigrated: "The idempotency store is not migrated",
	probLeaseLost:   "The lease on this Idempotency-Key was lost while the request ran",
	probBadJSON:     "The request body is not JSON this route can read",
	probQuota:       "This client holds as many idempotency keys as it may",
}

// eventKeyTitles replace the titles that name the Idempotency-Key header on
// a route whose key is elsewhere (WithKeySource).
var eventKeyTitles = map[string]string{
	probMissingKey: "The request's idempotency key is missing",
	probInvalidKey: "The request's idempotency key is invalid",
}

// missingKeyDetail says where r's key was expected.
func (m *Middleware) missingKeyDetail(r *http.Request) string {
	if m.cfg.keys.isDefault() {
		return "this endpoint requires an Idempotency-Key header on " + r.Method + " requests"
	}
	return "this endpoint takes the idempotency key of " + r.Method + " requests from " + m.cfg.keys.String() + ", and the request has none; it was not executed"
}

func (m *Middleware) problem(w http.ResponseWriter, status int, typ, detail string, hdr map[string]string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	for k, v := range hdr {
		h.Set(k, v)
	}
	title := problemTitles[typ]
	if !m.cfg.keys.isDefault() && (typ == probMissingKey || typ == probInvalidKey) {
		title = eventKeyTitles[typ]
	}
	b, _ := json.Marshal(problem{Type: m.cfg.docs + "#" + typ, Title: title, Status: status, Detail: detail})
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
