package idemhttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// A stored response, as kept in the key store:
//
//	"IDH1" | flags (1) | status (2, big endian) | header count (uvarint)
//	| per header: name length (uvarint), name, value length (uvarint), value
//	| body (the rest)
//
// Flag notStored marks a response that was delivered but is not replayable
// (too large, or streamed); flag lost one whose status was sent but whose
// body broke off (the handler panicked, the upstream's body failed).
const recordMagic = "IDH1"

const (
	flagNotStored = 1
	flagLost      = 2
)

type record struct {
	notStored bool
	lost      bool
	status    int
	header    http.Header
	body      []byte
}

var errBadRecord = errors.New("idemhttp: stored record is corrupt")

func (r *record) encode() []byte {
	names := make([]string, 0, len(r.header))
	size := len(recordMagic) + 3 + binary.MaxVarintLen64 + len(r.body)
	for name, vals := range r.header {
		for _, v := range vals {
			size += 2*binary.MaxVarintLen64 + len(name) + len(v)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	b := make([]byte, 0, size)
	b = append(b, recordMagic...)
	var flags byte
	if r.notStored {
		flags |= flagNotStored
	}
	if r.lost {
		flags |= flagLost
	}
	b = append(b, flags, byte(r.status>>8), byte(r.status))
	count := 0
	for _, vals := range r.header {
		count += len(vals)
	}
	b = binary.AppendUvarint(b, uint64(count))
	for _, name := range names {
		for _, v := range r.header[name] {
			b = binary.AppendUvarint(b, uint64(len(name)))
			b = append(b, name...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, r.body...)
}

func decodeRecord(b []byte) (*record, error) {
	if len(b) < len(recordMagic)+3 || string(b[:len(recordMagic)]) != recordMagic {
		return nil, fmt.Errorf("%w: bad header", errBadRecord)
	}
	b = b[len(recordMagic):]
	r := &record{notStored: b[0]&flagNotStored != 0, lost: b[0]&flagLost != 0, status: int(b[1])<<8 | int(b[2]), header: http.Header{}}
	if r.status < 100 || r.status > 999 {
		return nil, fmt.Errorf("%w: status %d", errBadRecord, r.status)
	}
	b = b[3:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, fmt.Errorf("%w: header count", errBadRecord)
	}
	b = b[n:]
	field := func() (string, error) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return "", fmt.Errorf("%w: header field", errBadRecord)
		}
		s := string(b[n : n+int(l)])
		b = b[n+int(l):]
		return s, nil
	}
	for i := uint64(0); i < count; i++ {
		name, err := field()
		if err != nil {
			return nil, err
		}
		v, err := field()
		if err != nil {
			return nil, err
		}
		r.header[name] = append(r.header[name], v)
	}
	r.body = b
	return r, nil
}

// DescribeRecord decodes the result the middleware or proxy stores for a
// key, for operators (idem keys show): the stored status, and whether the
// response was not stored (too large or streamed: replays answer 410) or
// lost (the status was sent, then the body broke off: replays answer 502).
// A result that is not an idemhttp record returns an error.
func DescribeRecord(b []byte) (status int, notStored, lost bool, err error) {
	r, err := decodeRecord(b)
	if err != nil {
		return 0, false, false, err
	}
	return r.status, r.notStored, r.lost, nil
}

// IsStoreKey reports whether key has the form of the keys the middleware
// writes to the store (a digest of the principal's scope and the client's
// key, prefixed "http:").
func IsStoreKey(key string) bool { return strings.HasPrefix(key, "http:") }
