package versiongate

import "sync"

// Memory is a version gate over values held in process memory, keyed by K.
// It keeps the newest version seen for each key and the value that came with
// it. It is safe for concurrent use. Its state is lost with the process:
// after a restart every key starts unversioned, so use the SQL [Gate] when
// the gated state itself is durable.
type Memory[K comparable, V any] struct {
	mu      sync.RWMutex
	entries map[K]versioned[V]
}

type versioned[V any] struct {
	version int64
	value   V
}

// NewMemory returns an empty in-memory gate.
func NewMemory[K comparable, V any]() *Memory[K, V] {
	return &Memory[K, V]{entries: make(map[K]versioned[V])}
}

// Apply stores value for id if version is newer than the stored version (or
// id is new), and reports whether it did. Equal and older versions change
// nothing.
func (m *Memory[K, V]) Apply(id K, version int64, value V) (applied bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.entries[id]; ok && cur.version >= version {
		return false
	}
	m.entries[id] = versioned[V]{version: version, value: value}
	return true
}

// Get returns the stored value and version of id.
func (m *Memory[K, V]) Get(id K) (value V, version int64, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.entries[id]
	return e.value, e.version, ok
}

// Len returns the number of keys held.
func (m *Memory[K, V]) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.entries)
}
