// Package bounded is a map of at most a fixed number of entries: two generations of at
// most size/2 entries each. A lookup that hits the old generation moves the entry to the
// current one; when the current one is full it becomes the old one and the oldest
// generation is dropped (an approximate LRU with O(1) work). Safe for concurrent use.
package bounded

import "sync"

// Map is a bounded map; the zero value is not usable, call New.
type Map[K comparable, V any] struct {
	half     int
	mu       sync.Mutex
	cur, old map[K]V
}

// New returns a Map holding at most size entries (at least 2).
func New[K comparable, V any](size int) *Map[K, V] {
	half := max(size/2, 1)
	return &Map[K, V]{half: half, cur: make(map[K]V, half)}
}

// Get returns the value of key. keep, when not nil, is asked about a found value: false
// deletes the entry and Get reports a miss.
func (m *Map[K, V]) Get(key K, keep func(V) bool) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.cur[key]
	if !ok {
		if v, ok = m.old[key]; ok {
			delete(m.old, key)
			m.putLocked(key, v)
		}
	}
	if ok && keep != nil && !keep(v) {
		delete(m.cur, key)
		var zero V
		return zero, false
	}
	return v, ok
}

// Put sets the value of key.
func (m *Map[K, V]) Put(key K, v V) {
	m.mu.Lock()
	m.putLocked(key, v)
	m.mu.Unlock()
}

// Delete removes key.
func (m *Map[K, V]) Delete(key K) {
	m.mu.Lock()
	delete(m.cur, key)
	delete(m.old, key)
	m.mu.Unlock()
}

// Len is the number of entries held.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cur) + len(m.old)
}

func (m *Map[K, V]) putLocked(key K, v V) {
	if len(m.cur) >= m.half {
		m.old, m.cur = m.cur, make(map[K]V, m.half)
	}
	m.cur[key] = v
}
