package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// diffDuration makes TestDifferential run seeds until it has spent that long (make fuzz);
// without it, the fixed seeds only.
var diffDuration = flag.Duration("diff.duration", 0, "run TestDifferential over new seeds for this long")

// stockEvaluator evaluates the decision as a stock OPA would on the bundle tarGz: parsed
// afresh from its files, compiled by a new compiler over a new store, evaluated by topdown
// with the input document the gateway builds.
func stockEvaluator(t testing.TB, tarGz []byte) func(Input) (Decision, error) {
	t.Helper()
	b, err := bundle.NewReader(bytes.NewReader(tarGz)).WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*rego.Rego){rego.Query(Query), rego.Store(inmem.NewFromObject(b.Data))}
	for _, m := range b.Modules {
		opts = append(opts, rego.Module(m.Path, string(m.Raw)))
	}
	q, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return func(in Input) (Decision, error) {
		rs, err := q.Eval(context.Background(), rego.EvalParsedInput(inputValue(in)))
		if err != nil {
			return Decision{}, err
		}
		if len(rs) != 1 {
			return Decision{}, errors.New("decision undefined")
		}
		v, err := ast.InterfaceToValue(rs[0].Expressions[0].Value)
		if err != nil {
			return Decision{}, err
		}
		return decodeDecision(v)
	}
}

// Pools the generator draws from: globs with escapes, wildcards and classes; values with
// backslashes before delimiters; regular expressions; names.
var (
	diffGlobs = []string{`team\*`, `te\am`, `a/*/c`, `kb/*`, `kb/pages/*`, `kb/**`, `kb/{pages,docs}/*`,
		`[ab]*`, `team-?`, `x\\y`, `*`, `kb/team\*`, `a\/b`}
	// diffMatches are values each glob matches (as a query), the generator's bias towards
	// calls the platform's glob rules are about.
	diffMatches = map[string][]string{`team\*`: {`team*`}, `te\am`: {`team`}, `a/*/c`: {`a/x/c`, `a/x\/c`},
		`kb/*`: {`kb/pages`}, `kb/pages/*`: {`kb/pages/welcome`}, `kb/**`: {`kb/a/b/c`}, `kb/{pages,docs}/*`: {`kb/docs/d1`},
		`[ab]*`: {`b1`}, `team-?`: {`team-1`}, `x\\y`: {`x\y`}, `*`: {`b1`}, `kb/team\*`: {`kb/team*`}, `a\/b`: {`a/b`}}
	diffValues = []string{`team*`, `team\*`, `teamX`, `team`, `a/x/c`, `a/x\/c`, `a/b`, `a\/b`, `kb/pages/welcome`,
		`kb/pages\/x`, `kb/docs/d1`, `kb/team*`, `kb/a/b/c`, `b1`, `team-1`, `x\y`, ``}
	diffRegexes  = []string{`^agent:b.*`, `bot$`, `^user:[a-z]+$`, `\*`, `^(agent|service):`}
	diffSubjects = []Subject{{"agent", "agent:support-bot"}, {"agent", "agent:blocked"}, {"agent", "agent:bot"},
		{"user", "user:alice"}, {"user", "user:root"}, {"service", "service:s1"}, {"workflow", "workflow:w1"}}
	diffGroups = []string{"support", "editors", "temp-a", "temp-b", "ops"}
	diffRoles  = []string{"reader", "temp-writer", "temp-x", "admin"}
	diffEnvs   = []string{"project", "app", "org", "public-session", "mars"}
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func some[T any](r *rand.Rand, xs []T) []T {
	out := []T{}
	for _, x := range xs {
		if r.IntN(3) == 0 {
			out = append(out, x)
		}
	}
	return out
}

// diffPlatformRego is a module of platform deny rules drawn from templates: globs (in a rule
// body, through a function, negated, on the ref), regex.match, a comprehension, every,
// a data lookup, and a rule joining several.
// The first rule is always a glob of the resource (in the body or through a function).
// It returns the globs its rules match the resource with.
func diffPlatformRego(r *rand.Rand) (src string, globs []string) {
	var b strings.Builder
	b.WriteString("package xema.custom\n\n")
	glob := func() string {
		g := pick(r, diffGlobs)
		globs = append(globs, g)
		return regoString(g)
	}
	for i := range 2 + r.IntN(5) {
		code := fmt.Sprintf(`{"code": "CUSTOM_%d", "detail": "rule %d"}`, i, i)
		template := r.IntN(9)
		if i == 0 {
			template = r.IntN(2)
		}
		switch template {
		case 0:
			fmt.Fprintf(&b, "deny contains %s if glob.match(%s, [\"/\"], input.resource)\n\n", code, glob())
		case 1:
			fmt.Fprintf(&b, "g%d(x) if glob.match(%s, [\"/\"], x)\n\ndeny contains %s if g%d(input.resource)\n\n", i, glob(), code, i)
		case 2:
			fmt.Fprintf(&b, "deny contains %s if {\n\tinput.ref == %q\n\tis_string(input.resource)\n\tnot glob.match(%s, [\"/\"], input.resource)\n}\n\n",
				code, pick(r, []string{"kb:page.write@1", "kb:page.read@1"}), glob())
		case 3:
			fmt.Fprintf(&b, "deny contains %s if regex.match(%s, input.subject.ref)\n\n", code, regoString(pick(r, diffRegexes)))
		case 4:
			fmt.Fprintf(&b, "deny contains %s if count([g | some g in input.groups; startswith(g, %q)]) > %d\n\n", code, "temp-", r.IntN(2))
		case 5:
			fmt.Fprintf(&b, "deny contains %s if {\n\tcount(input.roles) > 0\n\tevery role in input.roles {\n\t\tstartswith(role, %q)\n\t}\n}\n\n", code, "temp-")
		case 6:
			fmt.Fprintf(&b, "deny contains %s if {\n\tsome biome, grants in data.xema.grants[input.ref]\n\tgrant := grants[input.org]\n\tnot grant.environments[input.environment]\n\tbiome == %q\n\tinput.subject.kind == %q\n}\n\n",
				code, "demo", pick(r, []string{"user", "service"}))
		case 7:
			fmt.Fprintf(&b, "deny contains %s if {\n\tglob.match(%s, [\"/\"], input.resource)\n\tregex.match(%s, input.subject.ref)\n}\n\n",
				code, glob(), regoString(pick(r, diffRegexes)))
		default:
			fmt.Fprintf(&b, "deny contains %s if {\n\tinput.subject.kind == %q\n\tglob.match(%s, null, input.ref)\n}\n\n",
				code, pick(r, []string{"service", "workflow"}), regoString(pick(r, []string{"kb:*", "*:*.read@1", "doc:*"})))
		}
	}
	return b.String(), globs
}

// diffData is the fixture's data with generated resource globs, subjects and environments
// on the grants.
func diffData(r *rand.Rand) map[string]any {
	data := testData(nil)
	for _, perBiome := range data["grants"].(map[string]any) {
		for _, perOrg := range perBiome.(map[string]any) {
			for _, g := range perOrg.(map[string]any) {
				grant := g.(map[string]any)
				switch r.IntN(3) {
				case 0:
					grant["resources"] = nil
				default:
					var globs []any
					for _, p := range some(r, diffGlobs) {
						globs = append(globs, p)
					}
					grant["resources"] = globs
				}
				if r.IntN(3) == 0 {
					subjects := map[string]any{}
					for _, s := range some(r, []string{"group:support", "group:editors", "role:reader", "agent:support-bot", "user:alice"}) {
						subjects[s] = r.IntN(4) > 0
					}
					grant["subjects"] = subjects
				}
				if r.IntN(3) == 0 {
					envs := map[string]any{}
					for _, e := range some(r, diffEnvs[:4]) {
						envs[e] = true
					}
					grant["environments"] = envs
				}
			}
		}
	}
	return data
}

// diffInputs are calls of every ref of the fixture (and an unknown one) with generated
// fields; half of them name a resource one of globs matches.
func diffInputs(r *rand.Rand, n int, globs []string) []Input {
	refs := []string{"kb:page.read@1", "kb:page.write@1", "kb:old.read@1", "kb:draft.read@1", "kb:secret.read@1",
		"workflow:run.start@1", "connector:scm.create-pull-request@1", "doc:page.share@1", "biome:install@1", "kb:nope@1"}
	out := make([]Input, 0, n)
	for range n {
		in := agentCall(pick(r, refs))
		in.Subject = pick(r, diffSubjects)
		in.Groups, in.Roles = some(r, diffGroups), some(r, diffRoles)
		in.Environment = pick(r, diffEnvs)
		in.Resource = pick(r, diffValues)
		if r.IntN(2) == 0 {
			in.Resource = pick(r, diffMatches[pick(r, globs)])
		}
		if r.IntN(4) == 0 {
			in.Armed = []string{pick(r, []string{"kb:*", "connector:*", "*:*.read@1"})}
		}
		if r.IntN(6) == 0 {
			in.OrgRole = "org_admin"
		}
		if r.IntN(6) == 0 {
			in.Usage = &Usage{RateExceeded: r.IntN(2) == 0, QuotaExceeded: r.IntN(2) == 0}
		}
		if r.IntN(5) == 0 {
			in.Bindings = map[string]bool{"repository/writer": true}
		}
		if r.IntN(8) == 0 {
			in.Approval = &Approval{Requester: "agent:x", ApprovalID: "apr_1"}
		}
		if r.IntN(8) == 0 {
			in.Biome = pick(r, []string{"demo", "other"})
		}
		if r.IntN(5) == 0 {
			in.Delegation = &Delegation{Person: pick(r, diffSubjects), OrgRole: pick(r, []string{"", "org_member", "org_admin"}),
				Groups: some(r, diffGroups), Roles: some(r, diffRoles), Actors: []string{in.Subject.Ref}}
			if r.IntN(3) == 0 {
				in.Delegation.MayAct = some(r, []string{in.Subject.Ref, "agent:other"})
			}
		}
		out = append(out, in)
	}
	return out
}

// TestDifferential compares the gateway's decisions with a fresh topdown evaluation of the
// same bundle (stockEvaluator) over generated grants, platform Rego and inputs: every input
// is decided on the first call of a revision (full evaluation), after the worker prepared
// its key (the residual of clean), after its residual of full_decision was made, and again
// (the hundredth call: with the decision cache on, a cache hit); then once more across a
// new data revision, before and after its keys are prepared. Fixed seeds; make fuzz runs
// more for longer (-diff.duration).
func TestDifferential(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	inputs := 60
	if testing.Short() || raceEnabled {
		seeds, inputs = seeds[:1], 25
	}
	var byResidual, byFull, indexDiffers uint64
	start := time.Now()
	for i := 0; i < len(seeds) || time.Since(start) < *diffDuration; i++ {
		seed := uint64(i + 1)
		if i < len(seeds) {
			seed = seeds[i]
		}
		res, full, differs := differentialRun(t, seed, inputs)
		byResidual, byFull, indexDiffers = byResidual+res, byFull+full, indexDiffers+differs
		if t.Failed() {
			t.Fatalf("seed %d: the gateway's decisions differ from stock OPA's (reproduce: the seed's run alone)", seed)
		}
	}
	if byResidual == 0 || byFull == 0 {
		t.Fatalf("a path decided nothing: %d by residuals, %d in full", byResidual, byFull)
	}
	if indexDiffers == 0 {
		t.Fatal("no generated input reaches OPA's glob index bug: the corpus lost its teeth")
	}
	t.Logf("%d decisions by residuals, %d in full; %d inputs that OPA's index, unworked-around, would decide otherwise",
		byResidual, byFull, indexDiffers)
}

// differentialRun is one seed of TestDifferential: two engines (decision cache off and on)
// over the seed's platform Rego, data and inputs, across two revisions.
func differentialRun(t *testing.T, seed uint64, n int) (byResidual, byFull, indexDiffers uint64) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	dir := t.TempDir()
	src, globs := diffPlatformRego(r)
	if err := os.WriteFile(filepath.Join(dir, "platform.rego"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var engines []*Engine
	for _, size := range []int{-1, 0} {
		e, err := New(ctx, Options{ExtraDir: dir, DecisionCacheSize: size})
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, src)
		}
		engines = append(engines, e)
	}
	inputs := diffInputs(r, n, globs)
	for rev := range 2 {
		revision := fmt.Sprintf("r%d", rev+1)
		data := diffData(r)
		for _, e := range engines {
			if err := e.Load(ctx, data, revision); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			e.serving.Load().fast.pause.Store(0)
		}
		tarGz, _ := engines[0].Bundle()
		stock := stockEvaluator(t, tarGz)
		for round := range 4 {
			for _, e := range engines {
				for _, in := range inputs {
					compareDecision(t, fmt.Sprintf("seed %d, %s, round %d, cache %v", seed, revision, round, e.cacheSize == 0), e, stock, in)
				}
			}
			for _, e := range engines {
				settle(t, e)
			}
		}
		for _, e := range engines {
			f := e.serving.Load().fast
			byResidual, byFull = byResidual+f.byResidual.Load(), byFull+f.byFull.Load()
		}
		indexDiffers += unworkedAround(t, tarGz, src, inputs)
	}
	if t.Failed() {
		t.Logf("seed %d platform Rego:\n%s", seed, src)
	}
	return byResidual, byFull, indexDiffers
}

func compareDecision(t *testing.T, label string, e *Engine, stock func(Input) (Decision, error), in Input) {
	t.Helper()
	got, gotErr := e.Decide(context.Background(), in)
	want, wantErr := stock(in)
	if (gotErr != nil) != (wantErr != nil) || !sameDecision(got, want) {
		raw, _ := json.Marshal(in)
		t.Errorf("%s: input %s\n gateway %+v (%v)\n stock   %+v (%v)", label, raw, got, gotErr, want, wantErr)
	}
}

// sameDecision compares the engine's decision with stock OPA's. Stock OPA names the data's
// revision; the engine's names the platform Rego too (servingRevision: "rN+p<hash>"), so the
// engine's must extend the data's and the rest must be equal.
func sameDecision(engine, stock Decision) bool {
	rev := engine.Revision
	if rev != stock.Revision && !strings.HasPrefix(rev, stock.Revision+"+p") {
		return false
	}
	engine.Revision = stock.Revision
	return reflect.DeepEqual(engine, stock)
}

// unworkedAround counts the inputs the bundle would decide otherwise if its platform
// module were served as written (OPA's index then skipping a glob rule): the workaround's
// share of the corpus.
func unworkedAround(t *testing.T, tarGz []byte, platform string, inputs []Input) uint64 {
	t.Helper()
	b, err := bundle.NewReader(bytes.NewReader(tarGz)).WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*rego.Rego){rego.Query(Query), rego.Store(inmem.NewFromObject(b.Data))}
	for _, m := range b.Modules {
		src := string(m.Raw)
		if strings.Contains(m.Path, "custom/") {
			src = platform
		}
		opts = append(opts, rego.Module(m.Path, src))
	}
	q, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stock := stockEvaluator(t, tarGz)
	var n uint64
	for _, in := range inputs {
		rs, err := q.Eval(context.Background(), rego.EvalParsedInput(inputValue(in)))
		want, wantErr := stock(in)
		if err != nil || wantErr != nil || len(rs) != 1 {
			continue
		}
		v, err := ast.InterfaceToValue(rs[0].Expressions[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := decodeDecision(v); err == nil && !reflect.DeepEqual(d, want) {
			n++
		}
	}
	return n
}
