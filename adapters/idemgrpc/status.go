package idemgrpc

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the Domain of the google.rpc.ErrorInfo detail that every
// status idemgrpc itself returns carries; its Reason is one of the Reason
// constants, so that clients can branch on it.
const ErrorDomain = "idem.dev/idemgrpc"

// The Reason of the ErrorInfo detail of each status idemgrpc returns. The
// handler did not run for any of them, except ReasonNotStored, whose call
// was executed once, earlier, and ReasonLeaseLost, whose handler ran while
// its key was released or taken over (its outcome is unknown; the retry
// executes).
const (
	ReasonMissingKey        = "MISSING_KEY"             // InvalidArgument: WithRequired and no key
	ReasonInvalidKey        = "INVALID_KEY"             // InvalidArgument: malformed or repeated key
	ReasonNoPrincipal       = "NO_PRINCIPAL"            // Unauthenticated: keyed call without a principal
	ReasonInvalidScope      = "INVALID_SCOPE"           // InvalidArgument: the scope function failed
	ReasonInProgress        = "IN_PROGRESS"             // Unavailable + grpc-retry-pushback-ms
	ReasonKeyReused         = "KEY_REUSED"              // FailedPrecondition: same key, another request
	ReasonStore             = "STORE_UNAVAILABLE"       // Unavailable: the store did not answer
	ReasonNotStored         = "RESPONSE_NOT_STORED"     // FailedPrecondition: executed, response too large to keep
	ReasonCorrupt           = "STORED_RESPONSE_CORRUPT" // Internal: the stored record cannot be replayed
	ReasonUnfingerprintable = "REQUEST_NOT_PROTOBUF"    // Internal: the request is not a proto.Message
	ReasonNotMigrated       = "STORE_NOT_MIGRATED"      // FailedPrecondition: the store's table does not exist (call its Migrate)
	ReasonLeaseLost         = "LEASE_LOST"              // Unavailable + RetryInfo: the key was released (or taken over) while the handler ran; it ran, its outcome is unknown
)

// failure builds the status of one of idemgrpc's own answers.
func failure(code codes.Code, reason, msg string, extra ...protoadapt.MessageV1) error {
	st := status.New(code, "idemgrpc: "+msg)
	details := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}, extra...)
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

// statusOf is the status the gRPC server sends for a handler's error: its
// own status, or the context error's code, or Unknown.
func statusOf(err error) *status.Status {
	if err == nil {
		return status.New(codes.OK, "")
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// reasonOf returns the ErrorInfo reason of a status idemgrpc made ("" for
// any other error, or nil).
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain {
			return ei.GetReason()
		}
	}
	return ""
}
