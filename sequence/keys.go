package sequence

import "iter"

// producerKey names one (producer, partition).
type producerKey struct {
	producer  int64
	partition int32
}

// producerMap maps (producer, partition) to V. Kafka allocates producer ids
// upward from 0, so nearly every id fits in 32 bits; those keys are packed
// into one uint64, which Go's map hashes on its fast path (about half the
// cost of a 16-byte struct key in Tracker.Check). Larger ids use a second,
// struct-keyed map.
type producerMap[V any] struct {
	small map[uint64]V
	large map[producerKey]V
}

func newProducerMap[V any](size int) producerMap[V] {
	return producerMap[V]{small: make(map[uint64]V, size), large: make(map[producerKey]V)}
}

func packKey(k producerKey) (uint64, bool) {
	if uint64(k.producer) >= 1<<32 {
		return 0, false
	}
	return uint64(k.producer)<<32 | uint64(uint32(k.partition)), true
}

func (m *producerMap[V]) get(k producerKey) (V, bool) {
	if pk, ok := packKey(k); ok {
		v, ok := m.small[pk]
		return v, ok
	}
	v, ok := m.large[k]
	return v, ok
}

func (m *producerMap[V]) set(k producerKey, v V) {
	if pk, ok := packKey(k); ok {
		m.small[pk] = v
		return
	}
	m.large[k] = v
}

func (m *producerMap[V]) del(k producerKey) {
	if pk, ok := packKey(k); ok {
		delete(m.small, pk)
		return
	}
	delete(m.large, k)
}

func (m *producerMap[V]) len() int { return len(m.small) + len(m.large) }

// all yields every entry, in no particular order. Deleting the entry being
// visited is allowed.
func (m *producerMap[V]) all() iter.Seq2[producerKey, V] {
	return func(yield func(producerKey, V) bool) {
		for pk, v := range m.small {
			if !yield(producerKey{producer: int64(pk >> 32), partition: int32(uint32(pk))}, v) {
				return
			}
		}
		for k, v := range m.large {
			if !yield(k, v) {
				return
			}
		}
	}
}
