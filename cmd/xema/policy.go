package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/policy"
)

// newPolicyCmd is `xema policy`.
func newPolicyCmd() *cobra.Command {
	var (
		coverage, withBuiltin, verbose bool
		format                         string
		threshold                      float64
	)
	test := &cobra.Command{
		Use:   "test [DIR...]",
		Short: "Run the Rego tests of platform policy dirs (and, with --with-builtin, of the built-in policies)",
		Long: `Runs OPA's tester over the Rego and data files of each DIR, beside the embedded policies
(loaded so a test may evaluate data.xema.authz.decision; their own tests run only with
--with-builtin). A non-test file outside package xema.custom is refused, as xema serve
--policy-dir refuses it. print() output is kept: shown for failing tests (every test with -v),
in the JSON results and in JUnit's system-out.

--format text (OPA's pretty reporter), json (OPA's JSON reporter: the results; with --coverage or
--threshold, OPA's coverage report) or junit (JUnit XML for CI). --threshold P fails when the
line coverage of the tested files is below P percent.

Exit status: 0 all passed, 1 a test failed or coverage is below --threshold, 2 a usage or load
error (e.g. a package outside xema.custom).`,
		RunE: func(cmd *cobra.Command, dirs []string) error {
			switch {
			case format != "text" && format != "json" && format != "junit":
				return &exitError{code: 2, err: fmt.Errorf("--format must be text, json or junit, got %q", format)}
			case threshold < 0 || threshold > 100:
				return &exitError{code: 2, err: fmt.Errorf("--threshold %v: want a percentage from 0 to 100", threshold)}
			}
			rep, err := policy.Test(cmd.Context(), policy.TestOptions{Dirs: dirs, WithBuiltin: withBuiltin, Coverage: coverage || threshold > 0})
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			out := cmd.OutOrStdout()
			results := func() chan *tester.Result {
				ch := make(chan *tester.Result, len(rep.Raw))
				for _, r := range rep.Raw {
					ch <- r
				}
				close(ch)
				return ch
			}
			switch format {
			case "json":
				if rep.Cover != nil {
					err := tester.JSONCoverageReporter{Cover: rep.Cover, Modules: rep.CoverModules, Output: out, Threshold: threshold, Verbose: verbose}.Report(results())
					var te *cover.CoverageThresholdError
					if errors.As(err, &te) {
						return &exitError{code: 1, err: err}
					}
					if err != nil {
						return &exitError{code: 1, err: fmt.Errorf("policy test: %w", err)}
					}
					return nil
				}
				if err := (tester.JSONReporter{Output: out}).Report(results()); err != nil {
					return err
				}
			case "junit":
				if err := writeJUnit(out, rep); err != nil {
					return err
				}
			default:
				if err := (tester.PrettyReporter{Output: out, Verbose: verbose}).Report(results()); err != nil {
					return err
				}
				if rep.Coverage != nil {
					printCoverage(out, rep)
				}
			}
			if rep.Failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d policy test(s) failed", rep.Failed)}
			}
			if threshold > 0 && *rep.Coverage < threshold {
				return &exitError{code: 1, err: fmt.Errorf("coverage %.2f%% is below --threshold %.2f%%", *rep.Coverage, threshold)}
			}
			return nil
		},
	}
	f := test.Flags()
	f.BoolVar(&coverage, "coverage", false, "report line coverage")
	f.Float64Var(&threshold, "threshold", 0, "fail when line coverage is below this percentage (implies --coverage)")
	f.BoolVar(&withBuiltin, "with-builtin", false, "also run the built-in policies' tests (and count them in coverage)")
	f.StringVar(&format, "format", "text", "text, json or junit")
	f.BoolVarP(&verbose, "verbose", "v", false, "print every test, with its print() output")
	test.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	cmd := &cobra.Command{Use: "policy", Short: "Work with the Rego policies"}
	cmd.AddCommand(test)
	return cmd
}

func printCoverage(out io.Writer, rep policy.TestReport) {
	files := make([]string, 0, len(rep.FileCoverage))
	for f := range rep.FileCoverage {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		fmt.Fprintf(out, "coverage %6.2f%% %s", rep.FileCoverage[f], f)
		if rows := rep.NotCoveredRow[f]; len(rows) > 0 {
			fmt.Fprintf(out, " (not covered: lines %v)", rows)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "coverage %6.2f%% total\n", *rep.Coverage)
}

// JUnit XML (the de-facto schema CI systems read): one testsuite per Rego package.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr"`
	Line      int           `xml:"line,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	Skipped   *struct{}     `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

func writeJUnit(out io.Writer, rep policy.TestReport) error {
	doc := junitSuites{Name: "xema policy test"}
	byPkg := map[string]*junitSuite{}
	var order []string
	for _, r := range rep.Raw {
		s := byPkg[r.Package]
		if s == nil {
			s = &junitSuite{Name: r.Package}
			byPkg[r.Package] = s
			order = append(order, r.Package)
		}
		c := junitCase{Name: r.Name, Classname: r.Package, Time: fmt.Sprintf("%.6f", r.Duration.Seconds()), SystemOut: string(r.Output)}
		if r.Location != nil {
			c.File, c.Line = r.Location.File, r.Location.Row
		}
		s.Tests++
		switch {
		case r.Skip:
			c.Skipped = &struct{}{}
			s.Skipped++
		case r.Error != nil:
			c.Error = &junitProblem{Message: r.Error.Error(), Body: r.Error.Error()}
			s.Errors++
		case r.Fail:
			c.Failure = &junitProblem{Message: "test failed", Body: strings.TrimSpace(string(r.Output))}
			s.Failures++
		}
		s.Cases = append(s.Cases, c)
	}
	for _, p := range order {
		s := byPkg[p]
		var total float64
		for _, c := range s.Cases {
			var d float64
			_, _ = fmt.Sscanf(c.Time, "%f", &d) // a time that does not parse counts 0
			total += d
		}
		s.Time = fmt.Sprintf("%.6f", total)
		doc.Tests, doc.Failures, doc.Errors, doc.Skipped = doc.Tests+s.Tests, doc.Failures+s.Failures, doc.Errors+s.Errors, doc.Skipped+s.Skipped
		doc.Suites = append(doc.Suites, *s)
	}
	if _, err := io.WriteString(out, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(out)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("write JUnit: %w", err)
	}
	_, err := io.WriteString(out, "\n")
	return err
}
