package chaos

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The harness and a worker talk over the worker's stdin and stdout in
// length-prefixed frames:
//
//	frame   = length(uint32, big endian) kind(1 byte) payload(length-1 bytes)
//
//	H hello    harness → worker  JSON workerConfig
//	R ready    worker → harness  empty
//	D deliver  harness → worker  tag u64, msg u64, account u32, amount i64,
//	                             producer u32, seq u32, die u8   (37 bytes)
//	A ack      worker → harness  tag u64, outcome u8             (9 bytes)
//	N nack     worker → harness  tag u64, reason u8, text        (9+ bytes)
//	F fatal    worker → harness  text
//
// Integers are big endian. Every frame kind has a fixed payload size or a
// bounded one; readFrame rejects anything else, so a corrupt stream is an
// error, never a panic or a huge allocation.

// Frame kinds.
const (
	kindHello   byte = 'H'
	kindReady   byte = 'R'
	kindDeliver byte = 'D'
	kindAck     byte = 'A'
	kindNack    byte = 'N'
	kindFatal   byte = 'F'
)

const (
	deliverSize = 8 + 8 + 4 + 8 + 4 + 4 + 1
	ackSize     = 8 + 1
	// maxFrame bounds a frame's length field (kind and payload).
	maxFrame = 64 << 10
	// maxText bounds the text of a nack or fatal frame.
	maxText = 4 << 10
)

// errProtocol is wrapped by every malformed-frame error.
var errProtocol = errors.New("chaos: protocol error")

// Outcome of an acknowledged delivery, as the worker saw it.
const (
	outcomeApplied   byte = iota // the effect was applied by this delivery
	outcomeDuplicate             // recognised as already done: effect skipped
)

// Nack reasons: why the worker wants the delivery again later.
const (
	nackError      byte = iota // the attempt failed (database error, busy)
	nackInProgress             // keystore: another holder's lease is live
	nackGap                    // sequence: a predecessor has not been applied yet
	nackReasons
)

// delivery is one message handed to a worker.
type delivery struct {
	tag      uint64 // unique per delivery in a run
	msg      uint64 // message id, 1..N; copies share it
	account  uint32
	amount   int64
	producer uint32 // sequence strategy: producer (one partition each)
	seq      uint32 // sequence strategy: the message's sequence number, from 1
	die      point  // the step at which the worker must SIGKILL itself, or pointNone
}

// frame is one decoded frame. Which fields are set depends on kind.
type frame struct {
	kind    byte
	d       delivery // D
	tag     uint64   // A, N
	code    byte     // A: outcome; N: reason
	payload []byte   // H: JSON; N, F: text
}

// readFrame reads one frame from r.
func readFrame(r *bufio.Reader) (frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err // io.EOF between frames is a clean end
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxFrame {
		return frame{}, fmt.Errorf("%w: frame length %d", errProtocol, n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, fmt.Errorf("%w: truncated frame: %w", errProtocol, err)
	}
	return decodeFrame(buf)
}

// decodeFrame decodes a frame body: its kind byte and payload.
func decodeFrame(b []byte) (frame, error) {
	if len(b) == 0 {
		return frame{}, fmt.Errorf("%w: empty frame", errProtocol)
	}
	f := frame{kind: b[0]}
	p := b[1:]
	be := binary.BigEndian
	switch f.kind {
	case kindHello:
		if len(p) == 0 {
			return frame{}, fmt.Errorf("%w: empty hello", errProtocol)
		}
		f.payload = p
	case kindReady:
		if len(p) != 0 {
			return frame{}, fmt.Errorf("%w: ready frame with %d payload bytes", errProtocol, len(p))
		}
	case kindDeliver:
		if len(p) != deliverSize {
			return frame{}, fmt.Errorf("%w: deliver frame of %d bytes, want %d", errProtocol, len(p), deliverSize)
		}
		f.d = delivery{
			tag:      be.Uint64(p[0:]),
			msg:      be.Uint64(p[8:]),
			account:  be.Uint32(p[16:]),
			amount:   int64(be.Uint64(p[20:])),
			producer: be.Uint32(p[28:]),
			seq:      be.Uint32(p[32:]),
			die:      point(p[36]),
		}
		if f.d.die >= pointCount {
			return frame{}, fmt.Errorf("%w: unknown crash point %d", errProtocol, p[36])
		}
	case kindAck:
		if len(p) != ackSize {
			return frame{}, fmt.Errorf("%w: ack frame of %d bytes, want %d", errProtocol, len(p), ackSize)
		}
		f.tag, f.code = be.Uint64(p), p[8]
		if f.code > outcomeDuplicate {
			return frame{}, fmt.Errorf("%w: unknown ack outcome %d", errProtocol, f.code)
		}
	case kindNack:
		if len(p) < ackSize || len(p)-ackSize > maxText {
			return frame{}, fmt.Errorf("%w: nack frame of %d bytes", errProtocol, len(p))
		}
		f.tag, f.code, f.payload = be.Uint64(p), p[8], p[ackSize:]
		if f.code >= nackReasons {
			return frame{}, fmt.Errorf("%w: unknown nack reason %d", errProtocol, f.code)
		}
	case kindFatal:
		if len(p) > maxText {
			return frame{}, fmt.Errorf("%w: fatal frame of %d bytes", errProtocol, len(p))
		}
		f.payload = p
	default:
		return frame{}, fmt.Errorf("%w: unknown frame kind %#x", errProtocol, f.kind)
	}
	return f, nil
}

// appendFrame appends f's encoding to b. Text payloads longer than the
// protocol allows are truncated.
func appendFrame(b []byte, f frame) []byte {
	be := binary.BigEndian
	start := len(b)
	b = append(b, 0, 0, 0, 0, f.kind)
	switch f.kind {
	case kindHello:
		b = append(b, f.payload...)
	case kindDeliver:
		d := f.d
		b = be.AppendUint64(b, d.tag)
		b = be.AppendUint64(b, d.msg)
		b = be.AppendUint32(b, d.account)
		b = be.AppendUint64(b, uint64(d.amount))
		b = be.AppendUint32(b, d.producer)
		b = be.AppendUint32(b, d.seq)
		b = append(b, byte(d.die))
	case kindAck:
		b = be.AppendUint64(b, f.tag)
		b = append(b, f.code)
	case kindNack:
		b = be.AppendUint64(b, f.tag)
		b = append(b, f.code)
		b = append(b, f.payload[:min(len(f.payload), maxText)]...)
	case kindFatal:
		b = append(b, f.payload[:min(len(f.payload), maxText)]...)
	}
	be.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// writeFrame writes one frame to w (usually a *bufio.Writer; the caller
// flushes).
func writeFrame(w io.Writer, f frame) error {
	_, err := w.Write(appendFrame(nil, f))
	return err
}
