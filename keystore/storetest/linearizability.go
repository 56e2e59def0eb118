package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
)

// The linearizability test runs random Reserve, Complete and Release calls
// from several goroutines on a few keys, records when each call started
// and returned, and asks porcupine whether some sequential order of the
// calls, consistent with real time, explains every answer under the model
// below. Leases and TTLs are long, so nothing expires during the test and
// the model needs no clock.

type opKind uint8

const (
	opReserve opKind = iota
	opComplete
	opRelease
)

// lin is one call's input.
type lin struct {
	kind   opKind
	key    int
	fp     string // Reserve
	token  uint64 // Complete, Release
	result string // Complete
}

// outcome classifies a call's error.
type outcome uint8

const (
	outOK outcome = iota
	outMismatch
	outLeaseLost
)

// lout is one call's output.
type lout struct {
	out      outcome
	state    keystore.State // Reserve
	token    uint64         // Reserve, when acquired
	result   string         // Reserve, when done
	takeover bool
}

// mstate is the model's state of one key.
type mstate struct {
	state  uint8 // 0 absent, 1 in progress, 2 done
	token  uint64
	last   uint64 // highest token the key has had; survives Release
	fp     string
	result string
	// released is the token of the Release that made the key absent, until
	// the next Reserve: releasing it again may return nil (a store that
	// keeps a released key's token answers a repeated Release as it does a
	// repeated Complete; see keystore.Store) or ErrLeaseLost.
	released uint64
}

func conflict(stored, got string) bool { return stored != "" && got != "" && stored != got }

// step is the sequential specification of a Store for one key.
func step(s mstate, in lin, out lout) (bool, mstate) {
	switch in.kind {
	case opReserve:
		switch s.state {
		case 0:
			ok := out.out == outOK && out.state == keystore.Acquired && out.token > s.last && !out.takeover
			return ok, mstate{state: 1, token: out.token, last: out.token, fp: in.fp}
		case 1:
			if conflict(s.fp, in.fp) {
				return out.out == outMismatch, s
			}
			return out.out == outOK && out.state == keystore.InProgress, s
		default:
			if conflict(s.fp, in.fp) {
				return out.out == outMismatch, s
			}
			return out.out == outOK && out.state == keystore.Done && out.result == s.result, s
		}
	case opComplete:
		switch {
		case s.state == 1 && in.token == s.token:
			n := s
			n.state, n.result = 2, in.result
			return out.out == outOK, n
		case s.state == 2 && in.token == s.token:
			return out.out == outOK, s // the same claim completing again
		}
		return out.out == outLeaseLost, s
	default: // opRelease
		switch {
		case s.state == 1 && in.token == s.token:
			return out.out == outOK, mstate{last: s.last, released: in.token}
		case s.state == 0 && s.released != 0 && in.token == s.released:
			return out.out == outOK || out.out == outLeaseLost, s // the same claim releasing again
		}
		return out.out == outLeaseLost, s
	}
}

var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(lin).key
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(byKey))
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return mstate{} },
	Step: func(state, input, output any) (bool, any) {
		return step(state.(mstate), input.(lin), output.(lout))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(lin), output.(lout)
		var call string
		switch in.kind {
		case opReserve:
			call = fmt.Sprintf("Reserve(k%d, fp=%q)", in.key, in.fp)
		case opComplete:
			call = fmt.Sprintf("Complete(k%d, tok=%d, %q)", in.key, in.token, in.result)
		default:
			call = fmt.Sprintf("Release(k%d, tok=%d)", in.key, in.token)
		}
		return fmt.Sprintf("%s -> %+v", call, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(mstate)) },
}

func testLinearizability(t *testing.T, s keystore.Store, cfg config) {
	ctx := testCtx(t)
	const workers, nkeys = 8, 3
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = newKey(fmt.Sprintf("lin%d", i))
	}
	perWorker := (cfg.ops + workers - 1) / workers
	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		failed  = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			tokens := make([][]uint64, nkeys) // tokens this worker acquired, per key
			ops := make([]porcupine.Operation, 0, perWorker)
			for range perWorker {
				in := lin{key: rng.IntN(nkeys)}
				toks := tokens[in.key]
				switch r := rng.IntN(100); {
				case r < 45 || len(toks) == 0:
					in.kind = opReserve
					in.fp = [...]string{"", "", "fp-a", "fp-a", "fp-a", "fp-b"}[rng.IntN(6)]
				case r < 75:
					in.kind = opComplete
					in.result = fmt.Sprintf("r%d", rng.IntN(1000))
				default:
					in.kind = opRelease
				}
				if in.kind != opReserve {
					switch r := rng.IntN(10); {
					case r < 7:
						in.token = toks[len(toks)-1]
					case r < 9:
						in.token = toks[rng.IntN(len(toks))]
					default:
						in.token = 1<<50 + rng.Uint64N(1<<20) // never issued
					}
				}
				call := time.Since(start).Nanoseconds()
				var out lout
				var err error
				c := keystore.Claim{Key: keys[in.key], State: keystore.Acquired, Token: in.token}
				switch in.kind {
				case opReserve:
					var cl keystore.Claim
					cl, err = s.Reserve(ctx, keys[in.key], []byte(in.fp), time.Hour)
					out = lout{state: cl.State, token: cl.Token, result: string(cl.Result), takeover: cl.Takeover}
					if err == nil && cl.State == keystore.Acquired {
						tokens[in.key] = append(toks, cl.Token)
					}
				case opComplete:
					err = s.Complete(ctx, c, []byte(in.result), time.Hour)
				default:
					err = s.Release(ctx, c)
				}
				ret := time.Since(start).Nanoseconds()
				switch {
				case err == nil:
				case errors.Is(err, idem.ErrFingerprintMismatch):
					out.out = outMismatch
				case errors.Is(err, keystore.ErrLeaseLost):
					out.out = outLeaseLost
				default:
					failed <- err
					return
				}
				ops = append(ops, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
			}
			mu.Lock()
			history = append(history, ops...)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatalf("operation failed: %v", err)
	}
	res, info := porcupine.CheckOperationsVerbose(model, history, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations on %d keys from %d goroutines: linearizable", len(history), nkeys, workers)
	case porcupine.Illegal:
		// Outside t.TempDir, which is removed when the test ends.
		path := filepath.Join(os.TempDir(), fmt.Sprintf("storetest-history-%d.html", time.Now().UnixNano()))
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Fatalf("history of %d operations is not linearizable (visualization: %s)", len(history), path)
	default:
		t.Fatalf("linearizability check of %d operations timed out", len(history))
	}
}
