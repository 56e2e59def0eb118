package idemgrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"google.golang.org/grpc/metadata"
)

// A stored response, as kept in the key store:
//
//	"IDG1" | flags (1) | status | message type | message | header | trailer
//
// where status (a marshalled google.rpc.Status, empty for OK), message type
// (the response's full protobuf name) and message (its wire encoding) are
// each a uvarint length and the bytes, and header and trailer are a uvarint
// count of pairs, each pair a length-prefixed key and value. Flag notStored
// marks a response that was delivered but is not replayable (too large);
// its status then holds only the code.
const recordMagic = "IDG1"

const flagNotStored = 1

type record struct {
	notStored bool
	status    []byte
	msgType   string
	msg       []byte
	header    metadata.MD
	trailer   metadata.MD
}

var errBadRecord = errors.New("idemgrpc: stored record is corrupt")

func appendField(b, f []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(f)))
	return append(b, f...)
}

func appendMD(b []byte, md metadata.MD) []byte {
	keys := make([]string, 0, len(md))
	count := 0
	for k, vs := range md {
		keys = append(keys, k)
		count += len(vs)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(b, uint64(count))
	for _, k := range keys {
		for _, v := range md[k] {
			b = appendField(b, []byte(k))
			b = appendField(b, []byte(v))
		}
	}
	return b
}

func (r *record) encode() []byte {
	b := make([]byte, 0, len(recordMagic)+1+len(r.status)+len(r.msgType)+len(r.msg)+64)
	b = append(b, recordMagic...)
	var flags byte
	if r.notStored {
		flags |= flagNotStored
	}
	b = append(b, flags)
	b = appendField(b, r.status)
	b = appendField(b, []byte(r.msgType))
	b = appendField(b, r.msg)
	b = appendMD(b, r.header)
	return appendMD(b, r.trailer)
}

type reader struct{ b []byte }

func (rd *reader) field() ([]byte, error) {
	l, n := binary.Uvarint(rd.b)
	if n <= 0 || l > uint64(len(rd.b)-n) {
		return nil, fmt.Errorf("%w: field length", errBadRecord)
	}
	f := rd.b[n : n+int(l)]
	rd.b = rd.b[n+int(l):]
	return f, nil
}

func (rd *reader) md() (metadata.MD, error) {
	count, n := binary.Uvarint(rd.b)
	if n <= 0 || count > uint64(len(rd.b)) {
		return nil, fmt.Errorf("%w: metadata count", errBadRecord)
	}
	rd.b = rd.b[n:]
	md := metadata.MD{}
	for range count {
		k, err := rd.field()
		if err != nil {
			return nil, err
		}
		v, err := rd.field()
		if err != nil {
			return nil, err
		}
		md[string(k)] = append(md[string(k)], string(v))
	}
	return md, nil
}

func decodeRecord(b []byte) (*record, error) {
	if len(b) < len(recordMagic)+1 || string(b[:len(recordMagic)]) != recordMagic {
		return nil, fmt.Errorf("%w: bad header", errBadRecord)
	}
	r := &record{notStored: b[len(recordMagic)]&flagNotStored != 0}
	rd := &reader{b: b[len(recordMagic)+1:]}
	var err error
	if r.status, err = rd.field(); err != nil {
		return nil, err
	}
	typ, err := rd.field()
	if err != nil {
		return nil, err
	}
	r.msgType = string(typ)
	if r.msg, err = rd.field(); err != nil {
		return nil, err
	}
	if r.header, err = rd.md(); err != nil {
		return nil, err
	}
	if r.trailer, err = rd.md(); err != nil {
		return nil, err
	}
	if len(rd.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadRecord, len(rd.b))
	}
	return r, nil
}
