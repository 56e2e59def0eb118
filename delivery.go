package idem

import "strconv"

// Outcome is what a broker consumer (idemkafka, idemnats, idemamqp,
// idemwatermill) did with one delivered message. Every adapter reports the
// same four outcomes, through its WithObserver option.
type Outcome int

const (
	// Applied: the message's key and its effect committed; the message was
	// acknowledged.
	Applied Outcome = iota + 1
	// Duplicate: the key was already recorded; the handler did not run and
	// the message was acknowledged.
	Duplicate
	// Retried: the handler (or its transaction) failed; the message goes
	// back to the broker, or is run again, after a delay.
	Retried
	// DeadLettered: the message could never be applied (see [Reason]); it
	// was copied to the dead-letter target, if one is configured, and
	// removed from its queue.
	DeadLettered
)

var outcomeNames = [...]string{Applied: "applied", Duplicate: "duplicate", Retried: "retried", DeadLettered: "dead-lettered"}

// String returns the outcome's name: "applied", "duplicate", "retried",
// "dead-lettered".
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Reason says why a message was dead-lettered. Every adapter writes it, as
// text, into a header of the dead-lettered copy.
type Reason string

// The reasons every adapter shares. An adapter may add its own for
// transport problems (idemnats: a delivery without JetStream metadata).
const (
	// ReasonMissingKey: no key could be derived (no id header, or the key
	// function failed).
	ReasonMissingKey Reason = "missing-key"
	// ReasonInvalidKey: the key fails [ValidateKey] (empty, too long, not
	// UTF-8, a NUL byte).
	ReasonInvalidKey Reason = "invalid-key"
	// ReasonInvalidFingerprint: the fingerprint fails [ValidateFingerprint]
	// (longer than [MaxFingerprintLen]).
	ReasonInvalidFingerprint Reason = "invalid-fingerprint"
	// ReasonFingerprintMismatch: the key is recorded with another
	// fingerprint ([ErrFingerprintMismatch]): the key was reused for another
	// payload.
	ReasonFingerprintMismatch Reason = "fingerprint-mismatch"
	// ReasonPermanent: the handler returned an error marked with
	// [Permanent].
	ReasonPermanent Reason = "permanent"
	// ReasonMaxAttempts: the handler still failed at the consumer's last
	// allowed attempt (its WithMaxAttempts).
	ReasonMaxAttempts Reason = "max-attempts"
)

// DeliveryEvent reports one settled message of a broker consumer to its
// observer (WithObserver). M is the broker's message type; each adapter
// names its instance Event.
type DeliveryEvent[M any] struct {
	// Msg is the message as the broker delivered it.
	Msg M
	// Key is the message's idempotency key ("" when none could be derived).
	Key string
	// Attempt counts the deliveries (or runs) of the message, 1 for the
	// first.
	Attempt int
	// Outcome is what was done with the message.
	Outcome Outcome
	// Reason is set when Outcome is DeadLettered.
	Reason Reason
	// Err is the handler's, the key function's or the transaction's error,
	// for Retried and DeadLettered.
	Err error
}
