// Package natsenv runs NATS JetStream servers on loopback for idem's tests:
// one embedded server ([Run]) or a 3-node cluster ([Start], [Shared]) whose
// nodes a test can SIGKILL (a crash, not a shutdown) and start again on the
// same ports and store directory.
//
// Each cluster node is the test binary run again as a child process, an
// embedded nats-server with routes to the other two. The child is caught in
// this package's init, before the test binary's TestMain, and never runs a
// test; a test binary only has to import natsenv.
//
// natsenv is a module of its own, so that the core module does not require
// nats-server.
package natsenv
