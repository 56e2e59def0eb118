// Package failoverprobe holds the database failover probe of docs/ha.md
// (issue 29) and nothing else: its test starts a PostgreSQL primary and
// streaming standby (internal/testsupport/testenv.StartPGHA), drives an inbox consumer
// and SQL key store callers through them, holds replication back, kills the
// primary with SIGKILL, promotes the standby, and counts what the
// applications were told and the database forgot: messages acknowledged
// whose effect is gone, key-store effects that ran twice, fencing tokens
// handed out again or lower, and the outage seen through the multi-host URL.
//
// The faults: kill -9 after 1 s of held replication, a standby cut off for
// 6 s then kill -9, a clean switchover; on StartPGHA, and on a 3-member
// Patroni cluster (internal/testsupport/testenv.StartPatroni: kill -9 of the leader,
// detected by Patroni, or a switchover through its REST API). Asynchronous,
// synchronous, and asynchronous with the inbox's and the key store's
// WithWaitReplicas.
//
// `go test ./internal/testsupport/failoverprobe` runs the short version (a few hundred
// messages, three scenarios on StartPGHA); IDEM_FAILOVER_LONG=1 (`make
// failover-long`) runs every scenario with 20,000 messages and 2,000 keys;
// IDEM_FAILOVER_ONLY=regexp runs the scenarios whose names match, one at a
// time.
package failoverprobe
