package idemnats

// SetAfterCommit installs a hook that runs after a batch committed and
// before its messages are acked: tests kill the consumer there.
func SetAfterCommit(c *Consumer, f func()) { c.afterCommit = f }

func SetWindowAfterCommit(w *WindowConsumer, f func()) { w.c.afterCommit = f }
