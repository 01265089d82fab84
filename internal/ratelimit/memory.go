package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// Memory is an exact Counter in this process's memory, with the semantics of the store's
// AddUsage (fixed windows, all or none), for the embedded store whose file one process owns:
// a call's count costs no write of its own. Its counts reach the store through the audit
// log, which writes what is Unsaved in the transaction of each batch: a call runs only after
// its decision record commits, so every call that ran has its count durable with its
// record, and LoadMemory resumes every live window after a restart or a crash. Counters of
// ended windows go with PruneUsage, so memory is bounded by the counters of live windows.
// Safe for concurrent use.
type Memory struct {
	mu       sync.Mutex
	counters map[windowKey]*counter
	unsaved  []windowKey // counters changed since Unsaved last took them
}

type windowKey struct {
	key    string
	window int64
}

type counter struct {
	count   int64
	expires time.Time
	unsaved bool // in Memory.unsaved
}

// UsageLoader reads saved counters; store.ObligationStore is one.
type UsageLoader interface {
	LoadUsage(ctx context.Context, after time.Time) ([]store.UsageCount, error)
}

// UsageSaver writes counters; store.ObligationStore is one.
type UsageSaver interface {
	SaveUsage(ctx context.Context, counts []store.UsageCount) error
}

// LoadMemory is a Memory holding the counters of s whose window ended less than PruneGrace
// before now.
func LoadMemory(ctx context.Context, s UsageLoader, now time.Time) (*Memory, error) {
	saved, err := s.LoadUsage(ctx, now.Add(-PruneGrace))
	if err != nil {
		return nil, fmt.Errorf("load rate counters: %w", err)
	}
	m := &Memory{counters: make(map[windowKey]*counter, len(saved))}
	for _, c := range saved {
		m.counters[windowKey{c.Key, c.Window}] = &counter{count: c.Count, expires: c.Expires}
	}
	return m, nil
}

// AddUsage implements Counter as store.ObligationStore.AddUsage does: every add or none,
// refused names the first add (in the order given) that would pass its limit.
func (m *Memory) AddUsage(_ context.Context, adds []store.UsageAdd) ([]int64, int, error) {
	if err := store.ValidateUsageAdds(adds); err != nil {
		return nil, -1, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counters == nil {
		m.counters = map[windowKey]*counter{}
	}
	counts := make([]int64, len(adds))
	for i, a := range adds {
		k := windowKey{a.Key, a.Window}
		c := m.counters[k]
		if c == nil {
			c = &counter{expires: a.Expires}
			m.counters[k] = c
		}
		if c.count+a.N > a.Limit {
			for _, b := range adds[:i] { // undo the adds before it: all or none
				m.counters[windowKey{b.Key, b.Window}].count -= b.N
			}
			for _, b := range adds[:i+1] { // and forget the counters this call created
				m.dropEmpty(windowKey{b.Key, b.Window})
			}
			return nil, i, nil
		}
		c.count += a.N
		counts[i] = c.count
	}
	for _, a := range adds {
		k := windowKey{a.Key, a.Window}
		if c := m.counters[k]; !c.unsaved {
			c.unsaved = true
			m.unsaved = append(m.unsaved, k)
		}
	}
	return counts, -1, nil
}

// dropEmpty forgets the counter of k when nothing is counted on it: a refused call made it.
func (m *Memory) dropEmpty(k windowKey) {
	if c := m.counters[k]; c != nil && c.count == 0 && !c.unsaved {
		delete(m.counters, k)
	}
}

// PruneUsage implements Pruner: it forgets at most limit counters whose window ended before
// before (the store's rows go with the store's own PruneUsage).
func (m *Memory) PruneUsage(_ context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("prune usage counters: %w: limit must be positive, got %d", store.ErrInvalid, limit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, c := range m.counters {
		if n == int64(limit) {
			break
		}
		if c.expires.Before(before) {
			delete(m.counters, k)
			n++
		}
	}
	return n, nil
}

// Unsaved returns the counters changed since it was last called, as they are now, for the
// caller to write; the caller reports the write with Saved.
func (m *Memory) Unsaved() []store.UsageCount {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.unsaved) == 0 {
		return nil
	}
	out := make([]store.UsageCount, 0, len(m.unsaved))
	for _, k := range m.unsaved {
		if c := m.counters[k]; c != nil { // nil: pruned meanwhile
			c.unsaved = false
			out = append(out, store.UsageCount{Key: k.key, Window: k.window, Count: c.count, Expires: c.expires})
		}
	}
	clear(m.unsaved)
	m.unsaved = m.unsaved[:0]
	return out
}

// Saved reports the write of counts, taken from Unsaved: when it failed, they are unsaved
// again and go with the next write.
func (m *Memory) Saved(counts []store.UsageCount, err error) {
	if err == nil || len(counts) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range counts {
		k := windowKey{u.Key, u.Window}
		if c := m.counters[k]; c != nil && !c.unsaved {
			c.unsaved = true
			m.unsaved = append(m.unsaved, k)
		}
	}
}

// Save writes what is unsaved to s in one transaction (at shutdown, and on the prune tick
// for counts no audit batch carried).
func (m *Memory) Save(ctx context.Context, s UsageSaver) error {
	counts := m.Unsaved()
	err := s.SaveUsage(ctx, counts)
	m.Saved(counts, err)
	if err != nil {
		return fmt.Errorf("save rate counters: %w", err)
	}
	return nil
}
