package httptestx

import "sync"

// Outcomes records the outcomes a front end's hooks report, in order. It
// is safe for concurrent use; the zero value is empty.
type Outcomes[T any] struct {
	mu   sync.Mutex
	list []T
}

// Add records o.
func (r *Outcomes[T]) Add(o T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, o)
}

// All returns the outcomes recorded so far.
func (r *Outcomes[T]) All() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.list...)
}

// First returns the first outcome recorded, or T's zero value if none was.
func (r *Outcomes[T]) First() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first T
	if len(r.list) > 0 {
		first = r.list[0]
	}
	return first
}
