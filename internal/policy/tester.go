package policy

import (
	"context"
	"errors"
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

// TestOptions say what Test runs.
type TestOptions struct {
	// Dirs are platform policy directories: their Rego (package xema.custom, tests in any
	// package) and data files.
	Dirs []string
	// WithBuiltin also runs the embedded policies' own tests; without it the built-in
	// policies are loaded (a platform test may evaluate the whole decision) but their tests
	// are not, and coverage counts only the files of Dirs.
	WithBuiltin bool
	// Coverage measures line coverage.
	Coverage bool
}

// TestReport is the outcome of Test.
type TestReport struct {
	// Raw are OPA's tester results, print() output included (Result.Output), for OPA's
	// reporters.
	Raw     []*tester.Result
	Results []TestResult
	Passed  int
	Failed  int
	// Coverage is the line coverage in percent per file and overall (nil without coverage).
	Coverage      *float64
	FileCoverage  map[string]float64
	NotCoveredRow map[string][]int
	// Cover and CoverModules are what OPA's JSON coverage reporter reads.
	Cover        *cover.Cover
	CoverModules map[string]*ast.Module
}

// TestResult is one test rule's outcome.
type TestResult struct {
	Name     string // e.g. data.xematest.authz.test_allow
	Location string // file:row
	Pass     bool
	Skip     bool
	Error    string
}

// checkPlatformModule refuses platform Rego that xema serve would refuse: a non-test file
// outside package xema.custom (its rules would never join the decision).
func checkPlatformModule(path string, m *ast.Module) error {
	if policies.IsTest(path) || m.Package.Path.HasPrefix(customPackage) {
		return nil
	}
	return fmt.Errorf("platform policy %s: package %s must be %s or below it",
		path, m.Package.Path, customPackage)
}

// Test runs OPA's tester as `opa test` would over the Rego and data files of opts.Dirs
// beside the embedded policies (their tests only with opts.WithBuiltin), keeping each test's
// print() output, optionally measuring line coverage.
func Test(ctx context.Context, opts TestOptions) (TestReport, error) {
	if len(opts.Dirs) == 0 && !opts.WithBuiltin {
		return TestReport{}, errors.New("policy test: give a policy DIR, or --with-builtin for the built-in policies' tests")
	}
	list, err := readModules(policies.FS(), "policies", "policies", opts.WithBuiltin)
	if err != nil {
		return TestReport{}, fmt.Errorf("policy test: embedded policies: %w", err)
	}
	modules := make(map[string]*ast.Module, len(list))
	coverModules := map[string]*ast.Module{}
	for _, m := range list {
		modules[m.path] = m.parsed
		if opts.WithBuiltin {
			coverModules[m.path] = m.parsed
		}
	}
	store := inmem.New()
	if len(opts.Dirs) > 0 {
		extra, s, err := tester.LoadWithRegoVersion(opts.Dirs, nil, ast.RegoV1)
		if err != nil {
			return TestReport{}, fmt.Errorf("policy test: load %s: %w", strings.Join(opts.Dirs, ", "), err)
		}
		names := make([]string, 0, len(extra))
		for name := range extra {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			m := extra[name]
			if err := checkPlatformModule(name, m); err != nil {
				return TestReport{}, fmt.Errorf("policy test: %w (xema serve --policy-dir refuses it)", err)
			}
			if _, dup := modules[name]; dup {
				return TestReport{}, fmt.Errorf("policy test: %s loaded twice", name)
			}
			modules[name] = m
			coverModules[name] = m
		}
		store = s
	}
	runner := tester.NewRunner().SetStore(store).SetModules(modules).SetDefaultRegoVersion(ast.RegoV1).
		CapturePrintOutput(true).StackTraces(true)
	var cov *cover.Cover
	if opts.Coverage {
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
		rep.Raw = append(rep.Raw, r)
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
		rep.Cover, rep.CoverModules = cov, coverModules
		report := cov.Report(coverModules)
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
