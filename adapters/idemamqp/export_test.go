package idemamqp

// SetAfterCommit installs a hook that runs after a group committed and
// before its deliveries are acked: tests kill the consumer there.
func SetAfterCommit(c *Consumer, f func()) { c.afterCommit = f }
