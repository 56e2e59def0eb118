package idemhttp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
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
	count := 0
	for name, vals := range r.header {
		for _, v := range vals {
			size += 2*binary.MaxVarintLen64 + len(name) + len(v)
		}
		count += len(vals)
		names = append(names, name)
	}
	sort.Strings(names)
	b := appendRecordHead(make([]byte, 0, size), r.flags(), r.status, count)
	for _, name := range names {
		for _, v := range r.header[name] {
			b = appendRecordField(b, name, v)
		}
	}
	return append(b, r.body...)
}

func (r *record) flags() byte {
	var flags byte
	if r.notStored {
		flags |= flagNotStored
	}
	if r.lost {
		flags |= flagLost
	}
	return flags
}

// appendRecordHead appends a record's fixed head: magic, flags, status and
// the number of header fields that follow.
func appendRecordHead(b []byte, flags byte, status, fields int) []byte {
	b = append(b, recordMagic...)
	b = append(b, flags, byte(status>>8), byte(status))
	return binary.AppendUvarint(b, uint64(fields))
}

// appendRecordField appends one header field (a name and one value).
func appendRecordField(b []byte, name, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// problemRecord reports whether b, a stored record, is answered with a
// problem instead of its response (lost or not stored); false if b is too
// short to say (parse then reports it corrupt).
func problemRecord(b []byte) bool {
	return len(b) > len(recordMagic) && b[len(recordMagic)]&(flagNotStored|flagLost) != 0
}

func decodeRecord(b []byte) (*record, error) {
	r := &record{header: http.Header{}}
	if err := r.parse(b, r.header); err != nil {
		return nil, err
	}
	return r, nil
}

// parse reads the record b into r, and its header fields into h: a name's
// values replace those h had. The fields' names and values are substrings
// of one string, and their []string of one slice, so that a replay
// allocates twice for its header however many fields it has.
func (r *record) parse(b []byte, h http.Header) error {
	if len(b) < len(recordMagic)+3 || string(b[:len(recordMagic)]) != recordMagic {
		return fmt.Errorf("%w: bad header", errBadRecord)
	}
	b = b[len(recordMagic):]
	r.notStored, r.lost, r.status = b[0]&flagNotStored != 0, b[0]&flagLost != 0, int(b[1])<<8|int(b[2])
	if r.status < 100 || r.status > 999 {
		return fmt.Errorf("%w: status %d", errBadRecord, r.status)
	}
	b = b[3:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return fmt.Errorf("%w: header count", errBadRecord)
	}
	b = b[n:]
	// field returns the bounds of the field at off in b.
	field := func(off int) (start, end int, err error) {
		l, n := binary.Uvarint(b[off:])
		if n <= 0 || l > uint64(len(b)-off-n) {
			return 0, 0, fmt.Errorf("%w: header field", errBadRecord)
		}
		return off + n, off + n + int(l), nil
	}
	// First pass: check the fields, find where the body starts, and
	// whether the names are in order (the encoder sorts them).
	end, sorted := 0, true
	var prevName []byte
	for range count {
		ns, ne, err := field(end)
		if err != nil {
			return err
		}
		_, ve, err := field(ne)
		if err != nil {
			return err
		}
		if bytes.Compare(b[ns:ne], prevName) < 0 {
			sorted = false
		}
		prevName, end = b[ns:ne], ve
	}
	fields := string(b[:end])
	vals := make([]string, count)
	var seen map[string]bool // names met so far, when they are out of order
	if !sorted {
		seen = map[string]bool{}
	}
	prev := ""
	for i, off := 0, 0; i < int(count); i++ {
		ns, ne, _ := field(off)
		vs, ve, _ := field(ne)
		name, v := fields[ns:ne], fields[vs:ve]
		vals[i] = v
		if (i > 0 && name == prev) || seen[name] {
			h[name] = append(h[name], v)
		} else {
			h[name] = vals[i : i+1 : i+1]
		}
		if seen != nil {
			seen[name] = true
		}
		prev, off = name, ve
	}
	r.body = b[end:]
	return nil
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

// recordHead encodes the head of the record of a response with status and
// header h as it is sent: the header fields the configuration replays (see
// WithReplayHeaders), and the response's Request-Id or X-Request-Id as
// Original-Request. The result has room for the body: its Content-Length
// if set, else room bytes; bodyAt is where the body starts.
func (c *config) recordHead(status int, h http.Header, room int) (out []byte, bodyAt int) {
	var buf [16]string
	names := buf[:0]
	size, fields := len(recordMagic)+3+binary.MaxVarintLen64, 0
	for name, vals := range h {
		if c.replay[name] {
			names = append(names, name)
			for _, v := range vals {
				size += 2*binary.MaxVarintLen64 + len(name) + len(v)
			}
			fields += len(vals)
		}
	}
	origin := firstOf(h, "Request-Id", "X-Request-Id")
	if origin != "" {
		names = append(names, originalRequest)
		size += 2*binary.MaxVarintLen64 + len(originalRequest) + len(origin)
		fields++
	}
	slices.Sort(names)
	if cl := h.Get("Content-Length"); cl != "" { // Atoi("") would allocate its error
		if n, err := strconv.Atoi(cl); err == nil && n >= 0 {
			room = n
		}
	}
	size += min(room, c.maxResponse)
	out = appendRecordHead(make([]byte, 0, size), 0, status, fields)
	for _, name := range names {
		if name == originalRequest {
			out = appendRecordField(out, name, origin)
			continue
		}
		for _, v := range h[name] {
			out = appendRecordField(out, name, v)
		}
	}
	return out, len(out)
}

// bodyRoom is the room a response's record leaves for a body of unknown
// length: a quarter more than the average stored body (so that most bodies
// fit without the record growing, and a small one does not carry a large
// buffer), at least minBodyRoom; firstBodyRoom before any was stored.
func bodyRoom(avg int) int {
	if avg == 0 {
		return firstBodyRoom
	}
	return max(avg+avg/4, minBodyRoom)
}

const (
	firstBodyRoom = 512
	minBodyRoom   = 64
)

// originalRequest is the replayed name of the original response's request
// id, as Stripe replays it.
const originalRequest = "Original-Request"

func firstOf(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}
