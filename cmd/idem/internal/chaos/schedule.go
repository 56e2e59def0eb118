package chaos

import (
	"cmp"
	"slices"
	"time"
)

// The fault schedule is a pure function of the seed and of (message id,
// attempt number), never of a random stream consumed in arrival order, so
// that the same seed gives every message the same faults however the
// processes are scheduled. What still varies from run to run is timing: which
// worker gets which delivery, how long a transaction takes, whether a
// visibility timeout fires before a slow ack, and where exactly a harness
// SIGKILL lands.

// Salts separate the independent draws made for one (message, attempt).
const (
	saltCrash uint64 = iota + 1
	saltPoint
	saltKill
	saltKillDelay
	saltAckLoss
	saltDup
	saltDupPlace
	saltDupOffset
	saltReorder
	saltReorderBy
	saltAccount
	saltAmount
)

// Fault-model constants.
const (
	// faultyAttempts: only a message's first attempts can crash or lose
	// their ack, so that every message eventually gets through.
	faultyAttempts = 4
	// harnessKillShare is the share of crashes done by the harness with
	// SIGKILL at a random moment; the rest are die-at-step orders.
	harnessKillShare = 0.25
	// maxKillDelay bounds how long after sending a delivery the harness
	// kills the worker.
	maxKillDelay = 4 * time.Millisecond
	// reorderWindow: a reordered message is published up to this many
	// positions late.
	reorderWindow = 100
	// lateDupMin, lateDupMax: a late duplicate is published this many
	// positions after its original.
	lateDupMin, lateDupMax = 16, 2048
	// accounts is the number of accounts deposits go to.
	accounts = 100
)

// mix is SplitMix64's finaliser: a bijective, well-mixed hash of x.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// schedule decides every fault of a run from its seed.
type schedule struct {
	seed                               uint64
	dupRate, crashRate, ackLoss, reord float64
}

// draw returns a deterministic 64-bit value for (salt, a, b).
func (s schedule) draw(salt, a, b uint64) uint64 {
	return mix(mix(mix(s.seed^salt*0x9e3779b97f4a7c15)^a) ^ b*0xd1b54a32d192ed03)
}

// unit returns a deterministic float in [0, 1) for (salt, a, b).
func (s schedule) unit(salt, a, b uint64) float64 {
	return float64(s.draw(salt, a, b)>>11) / (1 << 53)
}

// fault is what happens to one delivery.
type fault struct {
	die       point         // the worker dies at this step (pointNone: it does not)
	kill      bool          // the harness SIGKILLs the worker killDelay after sending
	killDelay time.Duration // …
	ackLost   bool          // the worker's ack is dropped
}

// faultFor returns the fault of attempt (1-based) of message id under a
// strategy whose crash points are points.
func (s schedule) faultFor(id uint64, attempt int, points []point) fault {
	var f fault
	if attempt > faultyAttempts {
		return f
	}
	a := uint64(attempt)
	if s.unit(saltCrash, id, a) < s.crashRate {
		if s.unit(saltKill, id, a) < harnessKillShare {
			f.kill = true
			f.killDelay = time.Duration(s.unit(saltKillDelay, id, a) * float64(maxKillDelay))
		} else if len(points) > 0 {
			f.die = points[s.draw(saltPoint, id, a)%uint64(len(points))]
		}
	}
	f.ackLost = s.unit(saltAckLoss, id, a) < s.ackLoss
	return f
}

// message is one deposit.
type message struct {
	account  uint32
	amount   int64
	producer uint32
	seq      uint32
}

// messages returns the n deposits of a run; message id i is at index i-1.
// Message i belongs to producer (i-1) mod partitions and is that producer's
// message number (i-1)/partitions + 1 (0 is the producer's registration).
func (s schedule) messages(n, partitions int) []message {
	ms := make([]message, n)
	for i := range ms {
		id := uint64(i + 1)
		ms[i] = message{
			account:  uint32(s.draw(saltAccount, id, 0) % accounts),
			amount:   1 + int64(s.draw(saltAmount, id, 0)%1000),
			producer: uint32(i % partitions),
			seq:      uint32(i/partitions + 1),
		}
	}
	return ms
}

// entry is one copy of a message in the broker: the original or an
// injected duplicate. nacks counts its negative acknowledgements (for
// backoff).
type entry struct {
	msg   uint32 // index into the messages: id-1
	dup   bool
	nacks uint8
}

// publishOrder returns the copies the producer publishes, in the order the
// broker receives them: message ids in order, a reordered share published
// up to reorderWindow positions late, and a dupRate share published twice:
// half of the copies right behind the original (so that two consumers get
// them at the same time), half later (after the original was acked,
// usually).
func (s schedule) publishOrder(n int) []entry {
	type keyed struct {
		pos, tie uint64
		e        entry
	}
	ks := make([]keyed, 0, n+int(float64(n)*s.dupRate)+16)
	for i := range n {
		id := uint64(i + 1)
		pos := uint64(i) << 1
		if s.unit(saltReorder, id, 0) < s.reord {
			pos += (1 + s.draw(saltReorderBy, id, 0)%reorderWindow) << 1
		}
		ks = append(ks, keyed{pos: pos, tie: id << 1, e: entry{msg: uint32(i)}})
		if s.unit(saltDup, id, 0) >= s.dupRate {
			continue
		}
		dpos := pos | 1 // right behind
		if s.unit(saltDupPlace, id, 0) >= 0.5 {
			dpos = pos + (lateDupMin+s.draw(saltDupOffset, id, 0)%(lateDupMax-lateDupMin))<<1
		}
		ks = append(ks, keyed{pos: dpos, tie: id<<1 | 1, e: entry{msg: uint32(i), dup: true}})
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.tie, b.tie)
	})
	out := make([]entry, len(ks))
	for i, k := range ks {
		out[i] = k.e
	}
	return out
}
