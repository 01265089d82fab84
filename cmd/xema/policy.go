package main

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/policy"
)

func init() {
	var coverage bool
	test := &cobra.Command{
		Use:   "test [DIR...]",
		Short: "Run the Rego tests of the built-in policies and of platform policy dirs",
		Long: "Runs OPA's tester over the embedded policies/ (tests included) and the Rego and data\n" +
			"files of each DIR. Exits 1 when a test fails.",
		RunE: func(cmd *cobra.Command, dirs []string) error {
			rep, err := policy.Test(cmd.Context(), dirs, coverage)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			out := cmd.OutOrStdout()
			for _, r := range rep.Results {
				switch {
				case r.Skip:
					fmt.Fprintf(out, "SKIP %s (%s)\n", r.Name, r.Location)
				case r.Pass:
					fmt.Fprintf(out, "PASS %s\n", r.Name)
				default:
					fmt.Fprintf(out, "FAIL %s (%s) %s\n", r.Name, r.Location, r.Error)
				}
			}
			fmt.Fprintf(out, "passed %d, failed %d\n", rep.Passed, rep.Failed)
			if rep.Coverage != nil {
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
			if rep.Failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d policy test(s) failed", rep.Failed)}
			}
			return nil
		},
	}
	test.Flags().BoolVar(&coverage, "coverage", false, "report line coverage")
	cmd := &cobra.Command{Use: "policy", Short: "Work with the Rego policies"}
	cmd.AddCommand(test)
	rootCmd.AddCommand(cmd)
}
