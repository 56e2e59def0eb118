package sequence

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidBatch is wrapped by the error Check returns for a batch that
	// no idempotent producer can send (a negative producer id, epoch,
	// partition or sequence). The message names the field.
	ErrInvalidBatch = errors.New("sequence: invalid batch")

	// ErrFenced is wrapped by the error returned for a batch or message whose
	// producer epoch is lower than the one already seen for that producer
	// (Kafka error 47, INVALID_PRODUCER_EPOCH). A newer instance of the same
	// producer has taken over; the old one must stop.
	ErrFenced = errors.New("sequence: producer fenced by a newer epoch")

	// ErrOutOfOrder matches every *OutOfOrderError under errors.Is.
	ErrOutOfOrder = errors.New("sequence: out of order sequence")

	// ErrCorruptSnapshot is wrapped by the error Restore returns when its
	// input is not a snapshot this package wrote. The tracker is unchanged.
	ErrCorruptSnapshot = errors.New("sequence: corrupt snapshot")
)

// OutOfOrderError reports a sequence that is neither the next expected one
// nor an exact retry of a cached batch (Kafka error 45,
// OUT_OF_ORDER_SEQUENCE_NUMBER). Nothing was recorded.
//
// Expected is the sequence that would have been accepted: the successor of
// the last accepted sequence, or 0 for a batch that opens a new epoch.
type OutOfOrderError struct {
	Expected int32
	Got      int32
}

// Error implements error.
func (e *OutOfOrderError) Error() string {
	return fmt.Sprintf("sequence: out of order sequence: expected %d, got %d", e.Expected, e.Got)
}

// Is makes errors.Is(err, ErrOutOfOrder) true for every *OutOfOrderError.
func (e *OutOfOrderError) Is(target error) bool { return target == ErrOutOfOrder }
