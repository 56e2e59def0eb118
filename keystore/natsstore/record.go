package natsstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// A key's record is its latest message's data:
//
//	lease:   'L' leaseMs(uvarint) endUs(uvarint) len(fp)(uvarint) fp nonce
//	renewed: 'E' token(uvarint) leaseMs(uvarint) endUs(uvarint) len(fp)(uvarint) fp nonce
//	done:    'D' token(uvarint) ttlMs(uvarint) len(fp)(uvarint) fp result
//
// endUs is the holder's estimate of the lease's end (its clock when it
// published, plus the lease), in µs since 1970: reported as Expires to the
// holder and to everyone who finds the key in progress, a hint for
// Retry-After. The lease itself ends by the server's clock (the message's
// timestamp plus leaseMs), whatever the holder's clock says.
//
// A lease's token is its own revision (stream sequence); a renewal (Extend)
// is a new message that keeps the token of the lease it renews, so that a
// claim's token does not change while it is held; a result keeps the token
// of the lease it completed, so that a repeated Complete of the same claim
// is recognised. Writes are fenced on the key's current revision, after a
// read that checks that it is still the claim's lease. A delete marker (KV-Operation DEL or PURGE, or
// a server's Nats-Marker-Reason marker) means absent.
type record struct {
	done   bool
	token  uint64        // done, renewed: the lease's token
	dur    time.Duration // lease length, or result TTL
	fp     []byte
	nonce  []byte    // lease
	end    time.Time // lease: the holder's estimate of its end
	result []byte    // done
}

const nonceLen = 12

func encodeLease(lease time.Duration, end time.Time, fp, nonce []byte) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(fp)+len(nonce))
	b = append(b, 'L')
	b = binary.AppendUvarint(b, uint64(lease.Milliseconds()))
	b = binary.AppendUvarint(b, uint64(end.UnixMicro()))
	b = binary.AppendUvarint(b, uint64(len(fp)))
	b = append(b, fp...)
	return append(b, nonce...)
}

// encodeRenewed is the lease of token renewed to end at end.
func encodeRenewed(token uint64, lease time.Duration, end time.Time, fp, nonce []byte) []byte {
	b := make([]byte, 0, 1+4*binary.MaxVarintLen64+len(fp)+len(nonce))
	b = append(b, 'E')
	b = binary.AppendUvarint(b, token)
	return append(b, encodeLease(lease, end, fp, nonce)[1:]...)
}

func encodeDone(token uint64, ttl time.Duration, fp, result []byte) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(fp)+len(result))
	b = append(b, 'D')
	b = binary.AppendUvarint(b, token)
	b = binary.AppendUvarint(b, uint64(ttl.Milliseconds()))
	b = binary.AppendUvarint(b, uint64(len(fp)))
	b = append(b, fp...)
	return append(b, result...)
}

var errRecord = errors.New("natsstore: malformed record")

func decode(b []byte) (record, error) {
	if len(b) == 0 || (b[0] != 'L' && b[0] != 'D' && b[0] != 'E') {
		return record{}, errRecord
	}
	r := record{done: b[0] == 'D'}
	renewed := b[0] == 'E'
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var ok bool
	if r.done || renewed {
		if r.token, ok = next(); !ok || r.token == 0 {
			return record{}, errRecord
		}
	}
	ms, ok := next()
	if !ok {
		return record{}, errRecord
	}
	r.dur = time.Duration(ms) * time.Millisecond
	if !r.done {
		us, ok := next()
		if !ok {
			return record{}, errRecord
		}
		r.end = time.UnixMicro(int64(us))
	}
	n, ok := next()
	if !ok || n > uint64(len(b)) {
		return record{}, errRecord
	}
	r.fp, b = b[:n], b[n:]
	if r.done {
		r.result = b
	} else {
		if len(b) != nonceLen {
			return record{}, errRecord
		}
		r.nonce = b
	}
	return r, nil
}

// stored is a key's latest message as the stream leader has it.
type stored struct {
	seq     uint64
	time    time.Time
	marker  bool   // a delete marker: the key is absent
	release string // a Release's marker: the id of the call that wrote it
	rec     record
}

// leaseToken is the fencing token of a lease message: its own revision,
// or for a renewal the revision of the lease it renewed.
func (st stored) leaseToken() uint64 {
	if !st.marker && !st.rec.done && st.rec.token != 0 {
		return st.rec.token
	}
	return st.seq
}

// heldBy reports whether st is the live or lapsed lease of token.
func (st stored) heldBy(token uint64) bool {
	return !st.marker && !st.rec.done && st.leaseToken() == token
}

// releaseHeader carries the message id of the Release call that wrote a
// delete marker, so that the call can recognise its own marker.
const releaseHeader = "Idem-Release"

// last asks the stream leader (not a direct get, which any replica may
// answer from behind) for subject's latest message. ok is false when the
// subject has none.
func (s *Store) last(ctx context.Context, subject string) (st stored, ok bool, err error) {
	req, _ := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	msg, err := s.nc.RequestWithContext(ctx, s.apiPrefix+"STREAM.MSG.GET."+s.stream, req)
	if err != nil {
		return stored{}, false, err
	}
	var resp struct {
		Message *struct {
			Seq    uint64    `json:"seq"`
			Header []byte    `json:"hdrs"`
			Data   []byte    `json:"data"`
			Time   time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code    int    `json:"code"`
			ErrCode int    `json:"err_code"`
			Desc    string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return stored{}, false, fmt.Errorf("message get reply: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.Code == 404 {
			return stored{}, false, nil
		}
		return stored{}, false, fmt.Errorf("message get: %s (%d/%d)", resp.Error.Desc, resp.Error.Code, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return stored{}, false, errors.New("message get: empty reply")
	}
	st = stored{seq: resp.Message.Seq, time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return stored{}, false, fmt.Errorf("message get: headers: %w", err)
		}
		if h.Get("KV-Operation") != "" || h.Get("Nats-Marker-Reason") != "" {
			st.marker, st.release = true, h.Get(releaseHeader)
			return st, true, nil
		}
	}
	if st.rec, err = decode(resp.Message.Data); err != nil {
		return stored{}, false, err
	}
	return st, true, nil
}

// now is the stream leader's clock: the timestamp of a stream-info reply.
func (s *Store) now(ctx context.Context) (time.Time, error) {
	msg, err := s.nc.RequestWithContext(ctx, s.apiPrefix+"STREAM.INFO."+s.stream, nil)
	if err != nil {
		return time.Time{}, err
	}
	var resp struct {
		TS    time.Time `json:"ts"`
		Error *struct {
			Desc string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return time.Time{}, fmt.Errorf("stream info reply: %w", err)
	}
	if resp.Error != nil || resp.TS.IsZero() {
		return time.Time{}, fmt.Errorf("stream info: no server time (%+v)", resp.Error)
	}
	return resp.TS, nil
}
