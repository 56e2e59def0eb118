// Package chaos is a fault-injection harness that measures, with numbers,
// whether a consumer design turns at-least-once delivery into exactly-once
// effects. It is what `idem chaos` runs.
//
// An in-process broker in the harness delivers deposit messages (id,
// account, amount) with acks, redelivery after a visibility timeout and on
// a consumer's death, duplicate copies and reordering, to consumers that
// are separate OS processes (the program re-executed as a worker, see
// [ServeWorker]). The harness kills them with SIGKILL, both by telling a
// worker to die at a step of its consumer (before any work, inside the
// transaction, between two commits, after the commit and before the ack)
// and by killing workers at random moments; it drops acks and restarts the
// consumers. Every strategy applies its effect by incrementing a per-message
// counter in a ledger table and crediting an account in the same
// transaction, so that afterwards the ledger says, for every message,
// whether it was lost (0), applied once, or doubled (more).
//
// The strategies (see [Strategies]) are the naive designs the literature
// warns about, which the harness shows losing or doubling messages, and
// idem's: inbox.Process, inbox.ProcessBatch, keystore.Do with the key passed
// to an idempotent downstream, and sequence.SQLMarks. docs/chaos.md has the
// fault model, the crash points and what each naive design gets wrong.
//
// The fault schedule is a function of the seed ([WithSeed]), so a run can
// be repeated; the processes' timing cannot, and counts that depend on races
// (check-then-act's doubles, timeouts) vary from run to run.
package chaos
