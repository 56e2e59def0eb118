package natsstore

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errConflict: a fenced publish found another last revision than it
// expected.
var errConflict = errors.New("natsstore: revision conflict")

// publish sends data to subject, expecting expect as the subject's last
// sequence (0: no message), to expire after ttl, with message id id, and
// returns its sequence. A publish that gets no ack in time (a leader
// election, a lost reply) is sent once more with the same id: if the
// first landed, JetStream answers with its sequence (a duplicate), or the
// expectation fails and the caller's read tells.
func (s *Store) publish(ctx context.Context, subject string, data []byte, expect uint64, ttl time.Duration, id string, h nats.Header) (uint64, error) {
	if h == nil {
		h = nats.Header{}
	}
	var err error
	for try := 0; try < 2; try++ {
		if refuse := s.refusePublish; refuse != nil && refuse(subject) {
			return 0, errConflict
		}
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		var ack *jetstream.PubAck
		ack, err = s.js.PublishMsg(rctx, &nats.Msg{Subject: subject, Data: data, Header: h},
			jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(ttl), jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, errConflict
		}
		if !retryable(err) || ctx.Err() != nil {
			return 0, err
		}
	}
	return 0, err
}

// retryable reports errors after which a publish may or may not have
// landed, or no server took it: worth one more try with the same id.
func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected)
}

// get is last under the store's request timeout.
func (s *Store) get(ctx context.Context, subject string) (stored, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.last(rctx, subject)
}

// clock is now under the store's request timeout.
func (s *Store) clock(ctx context.Context) (time.Time, error) {
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.now(rctx)
}
