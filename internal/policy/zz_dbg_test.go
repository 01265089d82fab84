package policy

import (
	"context"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/storage"
)

type countingStore struct {
	storage.Store
	n     *int
	paths map[string]int
}

func (s countingStore) Read(ctx context.Context, txn storage.Transaction, path storage.Path) (any, error) {
	*s.n++
	s.paths[path.String()]++
	return copyingStore{s.Store}.Read(ctx, txn, path)
}

func TestZZPrepTime(t *testing.T) {
	e := syntheticEngine(t, 10_000)
	c := e.serving.Load()
	f := c.fast
	n := 0
	paths := map[string]int{}
	f.store = countingStore{c.store, &n, paths}
	allow, _ := benchCalls(10_000)
	start := time.Now()
	_, err := f.prepare(context.Background(), fastKey{ref: allow.Ref, org: allow.Org, biome: allow.Biome})
	t.Log(time.Since(start), err, n)
	for p, k := range paths {
		if k > 2 {
			t.Log(p, k)
		}
	}
	start = time.Now()
	_, err = f.prepare(context.Background(), fastKey{ref: syntheticRef(7), org: allow.Org, biome: allow.Biome})
	t.Log(time.Since(start), err)
}
