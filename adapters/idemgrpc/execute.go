package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/frontend/handlerctx"
	"github.com/idem-go/idem/keystore"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// execute runs the handler under the claim and stores or releases the key.
// The handler's context is idemhttp's (internal/frontend/handlerctx): the client's
// cancellation or deadline does not end it; the lease's loss (renewed
// meanwhile when the store can, see keystore.KeepAlive; with a store that
// cannot, its end), the handler timeout and Abort do. A panic releases the
// key and continues.
func (i *Interceptor) execute(ctx context.Context, req any, handler grpc.UnaryHandler, key string, claim keystore.Claim) (any, Outcome, error) {
	cap := &capture{inner: grpc.ServerTransportStreamFromContext(ctx)}
	hctx := grpc.NewContextWithServerTransportStream(ctx, cap)
	hctx, run := handlerctx.Start(hctx, i.store, key, claim, i.cfg.lease, i.handlerConfig())
	finished := false
	defer func() {
		_, _ = run.Stop() // stop renewing before the release below
		if !finished {
			i.release(ctx, claim, "handler panicked")
		}
	}()
	start := time.Now()
	resp, herr := handler(hctx, req)
	finished = true
	_, lost := run.Stop()
	i.took.Observe(time.Since(start))
	if lost != nil && !errors.Is(lost, keystore.ErrLeaseNotRenewed) {
		// The store refused a renewal: the key was released by an
		// operator, taken over or swept. It is no longer this claim's, so
		// nothing is stored or released (the store would refuse either),
		// and the client is told to retry: its retry executes.
		i.cfg.logger.InfoContext(ctx, "idemgrpc: the key was released by an operator (or taken over) while in progress; nothing to release", "code", statusOf(herr).Code().String(), "err", lost)
		return nil, idemhttp.OutcomeLeaseLost, failure(codes.Unavailable, ReasonLeaseLost, "idempotency: the key was released by an operator (or taken over) while the call ran; its outcome is unknown; retry with the same key", retryInfo(time.Second))
	}
	if lost != nil {
		i.cfg.logger.WarnContext(ctx, "idemgrpc: the lease was lost while the handler ran; its context was cancelled", "err", lost)
	}
	return resp, i.settle(ctx, claim, cap, resp, herr), herr
}

// settle stores the handler's answer under the claim, or releases the key
// when the answer's code says the call was not executed.
func (i *Interceptor) settle(ctx context.Context, claim keystore.Claim, cap *capture, resp any, herr error) Outcome {
	st := statusOf(herr)
	if i.cfg.release[st.Code()] {
		i.release(ctx, claim, "handler answered "+st.Code().String())
		return idemhttp.OutcomeReleased
	}
	rec := &record{}
	rec.header, rec.trailer = cap.kept(i.cfg.replay)
	if herr != nil {
		b, err := proto.Marshal(st.Proto())
		if err != nil {
			i.cfg.logger.ErrorContext(ctx, "idemgrpc: encoding the status failed; storing the call as not replayable", "err", err)
			rec = notStored(st.Code())
		} else {
			rec.status = b
		}
	} else if m, ok := resp.(proto.Message); !ok || m == nil {
		i.cfg.logger.ErrorContext(ctx, "idemgrpc: the response is not a proto.Message; storing the call as not replayable", "type", fmt.Sprintf("%T", resp))
		rec = notStored(codes.OK)
	} else if b, err := proto.Marshal(m); err != nil {
		i.cfg.logger.ErrorContext(ctx, "idemgrpc: encoding the response failed; storing the call as not replayable", "err", err)
		rec = notStored(codes.OK)
	} else {
		rec.msgType, rec.msg = string(m.ProtoReflect().Descriptor().FullName()), b
	}
	enc, o := rec.encode(), idemhttp.OutcomeExecuted
	if rec.notStored || len(enc) > i.cfg.maxResponse {
		enc, o = notStored(st.Code()).encode(), idemhttp.OutcomeNotStored
	}
	return i.complete(ctx, claim, enc, st.Code(), o)
}

func notStored(c codes.Code) *record {
	b, _ := proto.Marshal(&status.Status{Code: int32(c)})
	return &record{notStored: true, status: b}
}

// complete stores enc under the claim and returns o; a result the store
// finds too large is stored as "not stored" instead.
func (i *Interceptor) complete(ctx context.Context, claim keystore.Claim, enc []byte, code codes.Code, o Outcome) Outcome {
	sctx, cancel := i.storeCtx(ctx)
	defer cancel()
	err := i.store.Complete(sctx, claim, enc, i.cfg.ttl)
	if errors.Is(err, keystore.ErrResultTooLarge) {
		o = idemhttp.OutcomeNotStored
		err = i.store.Complete(sctx, claim, notStored(code).encode(), i.cfg.ttl)
	}
	switch {
	case errors.Is(err, keystore.ErrLeaseLost):
		i.cfg.logger.WarnContext(ctx, "idemgrpc: handler outlived its lease; response not stored (raise the lease)", "lease", i.cfg.lease)
		return idemhttp.OutcomeLeaseLost
	case err != nil:
		i.cfg.logger.ErrorContext(ctx, "idemgrpc: storing the response failed; the key stays in progress until its lease ends", "err", err)
		return idemhttp.OutcomeStoreError
	}
	return o
}

// replay answers with the stored response; the handler does not run. A
// record that cannot be replayed is a store error.
func (i *Interceptor) replay(ctx context.Context, c keystore.Claim) (any, Outcome, error) {
	resp, err := i.replayed(ctx, c)
	if reasonOf(err) == ReasonCorrupt {
		return nil, idemhttp.OutcomeStoreError, err
	}
	return resp, idemhttp.OutcomeReplayed, err
}

func (i *Interceptor) replayed(ctx context.Context, c keystore.Claim) (any, error) {
	rec, err := decodeRecord(c.Result)
	if err != nil {
		return nil, failure(codes.Internal, ReasonCorrupt, err.Error())
	}
	var sp status.Status
	if err := proto.Unmarshal(rec.status, &sp); err != nil {
		return nil, failure(codes.Internal, ReasonCorrupt, "stored status: "+err.Error())
	}
	hdr := rec.header.Copy()
	hdr.Set(MetadataReplayed, "true")
	_ = grpc.SetHeader(ctx, hdr)
	if len(rec.trailer) > 0 {
		_ = grpc.SetTrailer(ctx, rec.trailer)
	}
	switch {
	case rec.notStored:
		return nil, failure(codes.FailedPrecondition, ReasonNotStored, fmt.Sprintf("the call was executed and answered %v, but the response was too large to keep; it will not be executed again", codes.Code(sp.Code)))
	case sp.Code != int32(codes.OK):
		return nil, grpcstatus.ErrorProto(&sp)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(rec.msgType))
	if err != nil {
		return nil, failure(codes.Internal, ReasonCorrupt, fmt.Sprintf("stored response type %q: %v", rec.msgType, err))
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(rec.msg, m); err != nil {
		return nil, failure(codes.Internal, ReasonCorrupt, "stored response: "+err.Error())
	}
	return m, nil
}

// minPushback keeps retries of an in-progress key from hammering the store.
const minPushback = 20 * time.Millisecond

// pushback is how long a duplicate should wait: how long executions take
// recently minus how long the holder has run, bounded by the lease left;
// one second (or the lease left) before any execution was measured.
func (i *Interceptor) pushback(c keystore.Claim) time.Duration {
	left := max(time.Until(c.Expires), minPushback)
	took := i.took.Value()
	if took == 0 {
		return min(left, time.Second)
	}
	age := i.cfg.lease - left
	return max(min(took-age, left), minPushback)
}
