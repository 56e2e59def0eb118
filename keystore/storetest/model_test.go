package storetest

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/idem-go/idem/keystore"
)

// The model must reject the histories a broken store produces, or the
// linearizability test proves nothing.
func TestModelRejectsBrokenHistories(t *testing.T) {
	op := func(in lin, call, ret int64, out lout) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Return: ret, Output: out}
	}
	acq := func(tok uint64) lout { return lout{state: keystore.Acquired, token: tok} }
	tests := []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"two overlapping acquires are fine in one order", true, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 10, acq(1)),
			op(lin{kind: opReserve}, 1, 9, lout{state: keystore.InProgress}),
		}},
		{"two acquirers at once", false, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 10, acq(1)),
			op(lin{kind: opReserve}, 1, 9, acq(2)),
		}},
		{"token not increasing after release", false, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 1, acq(5)),
			op(lin{kind: opRelease, token: 5}, 2, 3, lout{}),
			op(lin{kind: opReserve}, 4, 5, acq(5)),
		}},
		{"stale complete accepted", false, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 1, acq(5)),
			op(lin{kind: opRelease, token: 5}, 2, 3, lout{}),
			op(lin{kind: opReserve}, 4, 5, acq(6)),
			op(lin{kind: opComplete, token: 5, result: "x"}, 6, 7, lout{}),
		}},
		{"replay of another result", false, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 1, acq(1)),
			op(lin{kind: opComplete, token: 1, result: "a"}, 2, 3, lout{}),
			op(lin{kind: opReserve}, 4, 5, lout{state: keystore.Done, result: "b"}),
		}},
		{"fingerprint ignored", false, []porcupine.Operation{
			op(lin{kind: opReserve, fp: "a"}, 0, 1, acq(1)),
			op(lin{kind: opReserve, fp: "b"}, 2, 3, lout{state: keystore.InProgress}),
		}},
		{"complete, replay, idempotent complete", true, []porcupine.Operation{
			op(lin{kind: opReserve, fp: "a"}, 0, 1, acq(1)),
			op(lin{kind: opComplete, token: 1, result: "a"}, 2, 3, lout{}),
			op(lin{kind: opComplete, token: 1, result: "z"}, 4, 5, lout{}),
			op(lin{kind: opReserve, fp: "a"}, 6, 7, lout{state: keystore.Done, result: "a"}),
			op(lin{kind: opRelease, token: 1}, 8, 9, lout{out: outLeaseLost}),
		}},
		{"repeated release, answered either way", true, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 1, acq(1)),
			op(lin{kind: opRelease, token: 1}, 2, 3, lout{}),
			op(lin{kind: opRelease, token: 1}, 4, 5, lout{}), // a store that keeps the released token
			op(lin{kind: opRelease, token: 1}, 6, 7, lout{out: outLeaseLost}),
			op(lin{kind: opReserve}, 8, 9, acq(2)),
		}},
		{"stale release accepted while another holds the key", false, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 1, acq(1)),
			op(lin{kind: opRelease, token: 1}, 2, 3, lout{}),
			op(lin{kind: opReserve}, 4, 5, acq(2)),
			op(lin{kind: opRelease, token: 1}, 6, 7, lout{}),
		}},
		{"release of a token never released accepted on an absent key", false, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 1, acq(1)),
			op(lin{kind: opRelease, token: 1}, 2, 3, lout{}),
			op(lin{kind: opRelease, token: 7}, 4, 5, lout{}),
		}},
		{"a key released, reserved and released again: the first token is stale", false, []porcupine.Operation{
			op(lin{kind: opReserve}, 0, 1, acq(1)),
			op(lin{kind: opRelease, token: 1}, 2, 3, lout{}),
			op(lin{kind: opReserve}, 4, 5, acq(2)),
			op(lin{kind: opRelease, token: 2}, 6, 7, lout{}),
			op(lin{kind: opRelease, token: 1}, 8, 9, lout{}),
		}},
	}
	for _, tc := range tests {
		if got := porcupine.CheckOperations(model, tc.h); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
