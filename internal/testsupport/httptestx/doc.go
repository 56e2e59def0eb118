// Package httptestx holds test helpers shared by the tests of idem's front
// ends (the HTTP middleware and proxy, the gRPC interceptor, idem serve): a
// payment provider's ledger that checks a retrying client was charged
// once per key, a recorder of the outcomes their hooks report, and a slow
// client that sends a request's head and then its body a byte at a time.
// It imports only the standard library, so that any module's tests can use
// it.
package httptestx
