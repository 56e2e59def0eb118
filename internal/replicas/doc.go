// Package replicas is the part of the replication options that the inbox
// and keystore/sqlstore share: WithWaitReplicas's validation and
// WithReplicationCheck's check that reports its own failure as a hazard.
// What each package does with them (when it waits, whom it tells) stays in
// that package.
package replicas
