package policy

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/xemahq/xema/policies"
)

// TestReport is the outcome of Test.
type TestReport struct {
	Results []TestResult
	Passed  int
	Failed  int
	// Coverage is the line coverage in percent per file and overall (nil without coverage).
	Coverage      *float64
	FileCoverage  map[string]float64
	NotCoveredRow map[string][]int
}

// TestResult is one test rule's outcome.
type TestResult struct {
	Name     string // e.g. data.xematest.authz.test_allow
	Location string // file:row
	Pass     bool
	Skip     bool
	Error    string
}

// Test runs OPA's tester over the embedded policies (tests included) and the Rego and data
// files of dirs, as `opa test` would, optionally measuring line coverage.
func Test(ctx context.Context, dirs []string, coverage bool) (TestReport, error) {
	modules, err := embeddedModules()
	if err != nil {
		return TestReport{}, err
	}
	store := inmem.New()
	if len(dirs) > 0 {
		extra, s, err := tester.LoadWithRegoVersion(dirs, nil, ast.RegoV1)
		if err != nil {
			return TestReport{}, fmt.Errorf("policy test: load %s: %w", strings.Join(dirs, ", "), err)
		}
		for name, m := range extra {
			if _, dup := modules[name]; dup {
				return TestReport{}, fmt.Errorf("policy test: %s loaded twice", name)
			}
			modules[name] = m
		}
		store = s
	}
	runner := tester.NewRunner().SetStore(store).SetModules(modules).SetDefaultRegoVersion(ast.RegoV1)
	var cov *cover.Cover
	if coverage {
		cov = cover.New()
		runner = runner.SetCoverageQueryTracer(cov)
	}
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return TestReport{}, fmt.Errorf("policy test: open store: %w", err)
	}
	defer store.Abort(ctx, txn)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return TestReport{}, fmt.Errorf("policy test: %w", err)
	}
	var rep TestReport
	for r := range ch {
		tr := TestResult{Name: r.Package + "." + r.Name, Location: fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row), Pass: r.Pass(), Skip: r.Skip}
		if r.Error != nil {
			tr.Error = r.Error.Error()
		}
		switch {
		case tr.Skip:
		case tr.Pass:
			rep.Passed++
		default:
			rep.Failed++
		}
		rep.Results = append(rep.Results, tr)
	}
	if cov != nil {
		report := cov.Report(modules)
		rep.Coverage = &report.Coverage
		rep.FileCoverage = map[string]float64{}
		rep.NotCoveredRow = map[string][]int{}
		for file, fr := range report.Files {
			rep.FileCoverage[file] = fr.Coverage
			for _, rng := range fr.NotCovered {
				rep.NotCoveredRow[file] = append(rep.NotCoveredRow[file], rng.Start.Row)
			}
			sort.Ints(rep.NotCoveredRow[file])
			rep.NotCoveredRow[file] = slices.Compact(rep.NotCoveredRow[file])
		}
	}
	return rep, nil
}

// embeddedModules parses every embedded .rego file, tests included.
func embeddedModules() (map[string]*ast.Module, error) {
	list, err := readModules(policies.FS(), "policies", true)
	if err != nil {
		return nil, fmt.Errorf("policy test: embedded policies: %w", err)
	}
	mods := make(map[string]*ast.Module, len(list))
	for _, m := range list {
		mods[m.path] = m.parsed
	}
	return mods, nil
}
