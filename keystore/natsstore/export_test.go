package natsstore

// RefusePublish makes the store's publishes to a subject for which refuse
// returns true fail as refused fenced writes (the server's wrong-last-
// sequence answer) without reaching the server.
func (s *Store) RefusePublish(refuse func(subject string) bool) { s.refusePublish = refuse }

// ErrUnsettled is errUnsettled, for tests.
var ErrUnsettled = errUnsettled
