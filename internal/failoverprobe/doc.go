// Package failoverprobe holds the database failover probe of docs/ha.md
// (issue 29) and nothing else: its test starts a PostgreSQL primary and
// streaming standby (internal/testenv.StartPGHA), drives an inbox consumer
// and SQL key store callers through them, holds replication back, kills the
// primary with SIGKILL, promotes the standby, and counts what the
// applications were told and the database forgot: messages acknowledged
// whose effect is gone, key-store effects that ran twice, fencing tokens
// handed out again or lower, and the outage seen through the multi-host URL.
//
// `go test ./internal/failoverprobe` runs the short version (a few hundred
// messages, two scenarios); IDEM_FAILOVER_LONG=1 (`make failover-long`) runs
// every scenario with 20,000 messages and 2,000 keys.
package failoverprobe
