package main

import (
	"fmt"
	"unsafe"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// The stack a message takes. Watermill's router starts a goroutine a
// message, on a 2 KiB stack that the runtime doubles (copying it) whenever
// a call would pass its end: the bytes of stack a middleware needs decide
// how many times each message pays for a copy. stackUse measures them, in
// steps of one padding frame: on a goroutine whose stack was grown to 8
// KiB, it finds how many padding frames leave too little room for f (its
// stack moves in at least half of the calls), and compares with an empty
// f. The runtime's own calls under f (an allocation that refills a span)
// count too; they are why the answer is a majority, not a maximum.

// padStack calls f under n frames of padding.
//
//go:noinline
func padStack(n int, f func()) byte {
	var buf [48]byte
	buf[n%len(buf)] = byte(n)
	if n <= 0 {
		f()
		return buf[3]
	}
	return padStack(n-1, f) + buf[(n+7)%len(buf)]
}

// growStack makes its goroutine's stack 8 KiB.
//
//go:noinline
func growStack(n int) byte {
	var buf [4000]byte
	buf[n%len(buf)] = byte(n)
	return buf[(n*7)%len(buf)]
}

// stackMoves reports whether f, called under n padding frames on a
// goroutine with an 8 KiB stack, made that stack grow (move).
func stackMoves(n int, f func()) bool {
	moved := make(chan bool)
	go func() {
		var x byte
		growStack(1)
		at := uintptr(unsafe.Pointer(&x))
		padStack(n, f)
		moved <- at != uintptr(unsafe.Pointer(&x))
	}()
	return <-moved
}

// padFrame is the bytes of stack one padding frame takes.
func padFrame() int {
	var outer, inner uintptr
	padStack(0, func() { var y byte; outer = uintptr(unsafe.Pointer(&y)) })
	padStack(1, func() { var y byte; inner = uintptr(unsafe.Pointer(&y)) })
	return int(outer - inner)
}

// roomLeft is the fewest padding frames under which f moves the stack in
// at least half of 20 calls (-1: none up to 400).
func roomLeft(f func()) int {
	for n := range 400 {
		moves := 0
		for range 20 {
			if stackMoves(n, f) {
				moves++
			}
		}
		if moves >= 10 {
			return n
		}
	}
	return -1
}

// stackUse is the bytes of stack f needs beyond its caller's, to one
// padding frame.
func stackUse(f func()) int {
	return (roomLeft(func() {}) - roomLeft(f)) * padFrame()
}

// wmStack measures the stack one side's middleware takes for a new event
// and for a duplicate, with the comparison's handler.
func wmStack(side string) (newEvent, duplicate int, err error) {
	dedup, closeStore, err := newDedup(side)
	if err != nil {
		return 0, 0, err
	}
	defer closeStore()
	h := dedup(func(msg *message.Message) ([]*message.Message, error) { return nil, nil })
	// Enough new events for every call roomLeft makes, made beforehand so
	// that formatting them is not measured.
	events := make([]*message.Message, 20*400+1)
	for i := range events {
		events[i] = message.NewMessage(watermill.NewUUID(), wmPayload(i))
	}
	var failed error
	handle := func(msg *message.Message) {
		if _, err := h(msg); err != nil && failed == nil {
			failed = err
		}
	}
	next := 0
	newEvent = stackUse(func() {
		handle(events[next%len(events)])
		next++
	})
	dup := message.NewMessage(watermill.NewUUID(), wmPayload(0))
	handle(dup)
	duplicate = stackUse(func() { handle(dup) })
	if failed != nil {
		return 0, 0, fmt.Errorf("peerbench: %s: %w", side, failed)
	}
	return newEvent, duplicate, nil
}
