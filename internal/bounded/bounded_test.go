package bounded

import "testing"

// TestBound: never more than size entries; a recently read entry survives a generation.
func TestBound(t *testing.T) {
	m := New[int, int](4)
	for i := range 100 {
		m.Put(i, i)
		if n := m.Len(); n > 4 {
			t.Fatalf("after %d puts: %d entries, want at most 4", i+1, n)
		}
	}
	m = New[int, int](4)
	m.Put(1, 1)
	m.Put(2, 2)
	m.Put(3, 3) // 1 and 2 become old
	if v, ok := m.Get(1, nil); !ok || v != 1 {
		t.Fatalf("Get(1) = %v, %v; want 1, true", v, ok)
	}
	m.Put(4, 4)
	m.Put(5, 5) // {3,1} become old, 2 dropped
	if _, ok := m.Get(2, nil); ok {
		t.Fatal("2 survived two generations unread")
	}
	if _, ok := m.Get(1, nil); !ok {
		t.Fatal("1, read a generation ago, was dropped")
	}
}

// TestKeep: a value keep refuses is deleted and reported a miss.
func TestKeep(t *testing.T) {
	m := New[string, int](8)
	m.Put("a", 1)
	if _, ok := m.Get("a", func(v int) bool { return v != 1 }); ok {
		t.Fatal("refused value reported a hit")
	}
	if n := m.Len(); n != 0 {
		t.Fatalf("%d entries after a refused value, want 0", n)
	}
	m.Put("b", 2)
	m.Delete("b")
	if _, ok := m.Get("b", nil); ok {
		t.Fatal("deleted key found")
	}
}
