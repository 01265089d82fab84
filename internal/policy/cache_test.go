package policy

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestDecisionCacheHitsAndStaysExact(t *testing.T) {
	ctx := context.Background()
	e := loadedEngine(t)
	cold, err := New(ctx, Options{ExtraDir: filepath.Join("testdata", "custom"), DecisionCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := cold.Load(ctx, testData(t), "r1"); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for _, tc := range decisionCases() {
			got, err := e.Decide(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := cold.Decide(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, %s: cached %+v, uncached %+v", round, tc.name, got, want)
			}
		}
	}
	n := uint64(len(decisionCases()))
	st := e.CacheStats()
	if !st.Enabled || st.Misses != n || st.Hits != n {
		t.Fatalf("stats %+v, want %d misses then %d hits", st, n, n)
	}
	if st := cold.CacheStats(); st.Enabled || st.Hits+st.Misses != 0 {
		t.Fatalf("turned-off cache counted: %+v", st)
	}
}

func TestDecisionCacheCopiesDecisions(t *testing.T) {
	ctx := context.Background()
	e := loadedEngine(t)
	in := with(agentCall("kb:page.read@1"), func(in *Input) { in.Environment = "org" })
	d1, err := e.Decide(ctx, in)
	if err != nil || len(d1.Reasons) == 0 {
		t.Fatalf("%+v, %v", d1, err)
	}
	d1.Reasons[0].Code = "MUTATED"
	d2, _ := e.Decide(ctx, in)
	d2.Reasons[0].Code = "MUTATED"
	d3, _ := e.Decide(ctx, in)
	if d3.Reasons[0].Code == "MUTATED" {
		t.Fatal("a caller's change to its decision reached the cache")
	}
}

func TestDecisionCacheIsPerRevision(t *testing.T) {
	ctx := context.Background()
	e := loadedEngine(t)
	in := agentCall("kb:page.read@1")
	if d, _ := e.Decide(ctx, in); !d.Allow {
		t.Fatal("fixture should allow")
	}
	data := testData(t)
	delete(data["grants"].(map[string]any), "kb:page.read@1")
	if err := e.Load(ctx, data, "r2"); err != nil {
		t.Fatal(err)
	}
	d, _ := e.Decide(ctx, in)
	if d.Allow || d.Revision != e.Revision() || !strings.HasPrefix(d.Revision, "r2+p") {
		t.Fatalf("after the grant went: %+v", d)
	}
	if st := e.CacheStats(); st.Hits != 0 || st.Misses != 1 {
		t.Fatalf("new revision's cache %+v", st)
	}
}

func TestDecisionCacheBounded(t *testing.T) {
	c := newDecisionCache(8)
	for i := range 100 {
		c.put(strings.Repeat("k", i+1), Decision{Allow: true})
	}
	if n := c.stats().Entries; n > 8 {
		t.Fatalf("%d entries, bound 8", n)
	}
	if _, ok := c.get(strings.Repeat("k", 100)); !ok {
		t.Fatal("the newest entry was evicted")
	}
}

func TestDecisionCacheOffForNondeterministicPolicy(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{ExtraDir: filepath.Join("testdata", "nondeterministic")})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(ctx, testData(t), "r1"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.Decide(ctx, agentCall("kb:page.read@1")); err != nil {
			t.Fatal(err)
		}
	}
	st := e.CacheStats()
	if st.Enabled || st.Hits != 0 || !strings.Contains(st.Reason, "time.now_ns") {
		t.Fatalf("stats %+v: want the cache off because of time.now_ns", st)
	}
	// Partial evaluation would fix the clock's answer into the residual: no fast path either.
	if e.serving.Load().fast != nil {
		t.Fatal("fast path on for a policy calling time.now_ns")
	}
}

func TestCacheKeyDistinguishesInputs(t *testing.T) {
	base := agentCall("kb:page.read@1")
	seen := map[string]string{cacheKey(base): "base"}
	for name, m := range mutations {
		k := cacheKey(with(base, m))
		if prev, ok := seen[k]; ok {
			t.Fatalf("%q and %q share a cache key", name, prev)
		}
		seen[k] = name
	}
	// Field boundaries are length-prefixed: moving a character between fields changes the key.
	a := with(base, func(in *Input) { in.Project, in.Session = "ab", "c" })
	b := with(base, func(in *Input) { in.Project, in.Session = "a", "bc" })
	if cacheKey(a) == cacheKey(b) {
		t.Fatal("field boundaries are ambiguous")
	}
}

// TestCacheKeyCoversEveryInputField: changing any field of Input, found by reflection (so
// a field added later is covered too), changes the cache key; a field the key left out
// would let one input's decision be served for another.
func TestCacheKeyCoversEveryInputField(t *testing.T) {
	base := agentCall("kb:page.read@1")
	checkKeyCoversFields(t, base) // nil pointers and maps
	base.Usage = &Usage{RetryAfterSeconds: 3}
	base.Approval = &Approval{Requester: "human:ann", ApprovalID: "apr_1"}
	base.Bindings = map[string]bool{"b": true}
	base.InstanceRelations = map[string]bool{"r": false}
	base.Delegation = &Delegation{Person: Subject{Kind: "user", Ref: "user:ann"}, OrgRole: "org_member",
		Groups: []string{"g"}, Roles: []string{"r"}, Actors: []string{base.Subject.Ref}, MayAct: []string{base.Subject.Ref}}
	base.Connection = &Connection{Provider: "slack", Owner: "user", Person: "user:ann", Status: "connected", ID: "con_1", ConnectURL: "https://x/console/#connections"}
	checkKeyCoversFields(t, base) // every sub-field of the pointers
}

func checkKeyCoversFields(t *testing.T, base Input) {
	t.Helper()
	baseKey := cacheKey(base)
	var walk func(path string, v reflect.Value, set func())
	walk = func(path string, v reflect.Value, set func()) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "~x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int:
			v.SetInt(v.Int() + 7)
		case reflect.Slice:
			v.Set(reflect.Append(v, reflect.ValueOf("zz-extra")))
		case reflect.Map:
			m := reflect.MakeMap(v.Type())
			for _, k := range v.MapKeys() {
				m.SetMapIndex(k, v.MapIndex(k))
			}
			m.SetMapIndex(reflect.ValueOf("zz-extra"), reflect.ValueOf(true))
			v.Set(m)
		case reflect.Pointer:
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
				set()
				return
			}
			for i := range v.Elem().NumField() {
				leaves := 1
				if v.Elem().Field(i).Kind() == reflect.Struct {
					leaves = v.Elem().Field(i).NumField()
				}
				for j := range leaves {
					in := clonePointers(base)
					f := reflect.ValueOf(&in).Elem().FieldByName(path).Elem().Field(i)
					if f.Kind() == reflect.Struct {
						f = f.Field(j)
					}
					walk(path, f, func() {})
					if cacheKey(in) == baseKey {
						t.Errorf("changing %s.%s (%d) leaves the cache key unchanged", path, v.Elem().Type().Field(i).Name, j)
					}
				}
			}
			return
		case reflect.Struct:
			for i := range v.NumField() {
				in := base
				f := reflect.ValueOf(&in).Elem().FieldByName(path).Field(i)
				walk(path, f, func() {})
				if cacheKey(in) == baseKey {
					t.Errorf("changing %s.%s leaves the cache key unchanged", path, v.Type().Field(i).Name)
				}
			}
			return
		default:
			t.Fatalf("Input.%s: kind %s not handled by this test", path, v.Kind())
		}
		set()
	}
	typ := reflect.TypeFor[Input]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		in := clonePointers(base)
		f := reflect.ValueOf(&in).Elem().Field(i)
		kind := f.Kind()
		walk(name, f, func() {})
		if kind == reflect.Struct || kind == reflect.Pointer && reflect.ValueOf(base).Field(i).IsValid() && !reflect.ValueOf(base).Field(i).IsNil() {
			continue // checked per sub-field by walk
		}
		if cacheKey(in) == baseKey {
			t.Errorf("changing Input.%s leaves the cache key unchanged", name)
		}
	}
}

// clonePointers is in with its own copies of what its pointers hold.
func clonePointers(in Input) Input {
	in.Usage, in.Approval = cloneUsage(in.Usage), cloneApproval(in.Approval)
	if d := in.Delegation; d != nil {
		c := *d
		c.Groups, c.Roles, c.Actors, c.MayAct = slices.Clone(d.Groups), slices.Clone(d.Roles), slices.Clone(d.Actors), slices.Clone(d.MayAct)
		in.Delegation = &c
	}
	return in
}

func cloneUsage(u *Usage) *Usage {
	if u == nil {
		return nil
	}
	c := *u
	return &c
}

func cloneApproval(a *Approval) *Approval {
	if a == nil {
		return nil
	}
	c := *a
	return &c
}
