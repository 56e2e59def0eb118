package chaos

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

func sampleFrames() []frame {
	return []frame{
		{kind: kindHello, payload: []byte(`{"strategy":"idem-inbox"}`)},
		{kind: kindReady},
		{kind: kindDeliver, d: delivery{tag: 1<<63 + 5, msg: 42, account: 7, amount: -3, producer: 9, seq: 1 << 31, die: pointBetween}},
		{kind: kindAck, tag: 77, code: outcomeDuplicate},
		{kind: kindNack, tag: 78, code: nackGap, payload: []byte("gap")},
		{kind: kindNack, tag: 79, code: nackError, payload: []byte{}},
		{kind: kindFatal, payload: []byte("cannot connect")},
		{kind: kindFatal, payload: []byte{}},
	}
}

// normal makes empty and nil payloads compare equal.
func normal(f frame) frame {
	if len(f.payload) == 0 {
		f.payload = nil
	}
	return f
}

func TestFramesRoundTrip(t *testing.T) {
	var buf []byte
	for _, f := range sampleFrames() {
		buf = appendFrame(buf, f)
	}
	r := bufio.NewReader(bytes.NewReader(buf))
	for _, want := range sampleFrames() {
		got, err := readFrame(r)
		if err != nil {
			t.Fatalf("read %q: %v", want.kind, err)
		}
		if !reflect.DeepEqual(normal(got), normal(want)) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	}
	if _, err := readFrame(r); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestBadFramesAreErrors(t *testing.T) {
	good := appendFrame(nil, frame{kind: kindDeliver, d: delivery{tag: 1, msg: 1}})
	for name, b := range map[string][]byte{
		"zero length":    {0, 0, 0, 0},
		"huge length":    {0x7f, 0, 0, 0, 'H'},
		"truncated":      good[:len(good)-3],
		"unknown kind":   {0, 0, 0, 1, 'Z'},
		"short deliver":  {0, 0, 0, 2, 'D', 0},
		"long ready":     {0, 0, 0, 2, 'R', 0},
		"empty hello":    {0, 0, 0, 1, 'H'},
		"bad die point":  append(append([]byte(nil), good[:len(good)-1]...), byte(pointCount)),
		"bad ack code":   {0, 0, 0, 10, 'A', 0, 0, 0, 0, 0, 0, 0, 1, 9},
		"bad nack code":  {0, 0, 0, 10, 'N', 0, 0, 0, 0, 0, 0, 0, 1, 9},
		"short nack":     {0, 0, 0, 3, 'N', 0, 0},
		"truncated head": {0, 0},
	} {
		_, err := readFrame(bufio.NewReader(bytes.NewReader(b)))
		if err == nil || errors.Is(err, io.EOF) && name != "truncated head" {
			t.Errorf("%s: err = %v, want a protocol error", name, err)
		}
	}
}

// FuzzReadFrame feeds arbitrary bytes to the decoder: it must never panic
// or allocate more than a frame's bound, and whatever it accepts must
// encode back to a frame that decodes to the same value.
func FuzzReadFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(appendFrame(nil, fr))
	}
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'D'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for range 64 {
			fr, err := readFrame(r)
			if err != nil {
				return
			}
			again, err := readFrame(bufio.NewReader(bytes.NewReader(appendFrame(nil, fr))))
			if err != nil {
				t.Fatalf("re-encoded %+v does not decode: %v", fr, err)
			}
			if !reflect.DeepEqual(normal(again), normal(fr)) {
				t.Fatalf("round trip changed %+v into %+v", fr, again)
			}
		}
	})
}
