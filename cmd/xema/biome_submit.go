package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/client"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/manifest"
)

// newBiomeSubmitCmd is `xema biome submit`.
func newBiomeSubmitCmd() *cobra.Command {
	var (
		api    adminFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "submit DIR",
		Short: "Submit a biome version to a gateway and print its permission digest",
		Long: `Lint DIR, then POST it to /v1/biomes and print the submitted version and its permission
digest (with --format json, the gateway's answer). Every problem (the local lint's, or the gateway's) is printed with its JSON pointer:
FILE: POINTER: MESSAGE, or with --format json the gateway's error body ({code, message, auditId,
violations: [{path, message}]}) or the lint's [{file, path, message}] on stdout.

Exit status: 0 submitted, 1 problems or a refusal, 2 a usage error or an unreadable DIR.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return &exitError{code: 2, err: fmt.Errorf("--format must be text or json, got %q", format)}
			}
			c, err := api.client()
			if err != nil {
				return err
			}
			dir := args[0]
			if _, problems, err := manifest.LoadDir(dir); err != nil {
				return &exitError{code: 2, err: err}
			} else if len(problems) > 0 {
				if format == "json" {
					if err := writeJSON(cmd.OutOrStdout(), problems); err != nil {
						return err
					}
				} else {
					for _, p := range problems {
						fmt.Fprintln(cmd.ErrOrStderr(), p.String())
					}
				}
				return &exitError{code: 1, err: fmt.Errorf("%s: %d problem(s); nothing submitted", dir, len(problems))}
			}
			sub, err := readSubmission(dir)
			if err != nil {
				return err
			}
			var out catalog.SubmitResult
			if err := c.Do(cmd.Context(), "POST", "/v1/biomes", sub, &out); err != nil {
				var ae *client.APIError
				if format == "json" && errors.As(err, &ae) && len(ae.Body) > 0 && json.Valid(ae.Body) {
					if werr := writeJSON(cmd.OutOrStdout(), ae.Body); werr != nil {
						return werr
					}
					return &exitError{code: 1, err: fmt.Errorf("%s (HTTP %d): %d problem(s)", ae.Code, ae.Status, max(len(ae.Violations), ae.ViolationCount))}
				}
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return writeSubmitted(cmd.OutOrStdout(), out)
		},
	}
	api.add(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "output format: text or json")
	return cmd
}

// writeSubmitted prints a submitted version for a person: the digest an admin approves, each
// capability it asks for by domain, what changed since the previous version, and the next step.
func writeSubmitted(w io.Writer, r catalog.SubmitResult) error {
	d := r.Digest
	fmt.Fprintf(w, "submitted %s %s: permission digest %s, risk tier %s\n", printable(r.BiomeID), printable(r.Version), printable(d.Hash), printable(d.RiskTier))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  DOMAIN\tCAPABILITY\tRISK\tAPPROVAL\tREASON")
	for _, domain := range slices.Sorted(maps.Keys(d.Domains)) {
		for _, e := range d.Domains[domain] {
			approval := "-"
			if e.RequiresApproval {
				approval = "required"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", printable(domain), printable(e.Ref), printable(e.RiskTier), approval, printable(e.Reason))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if prev := d.Diff.PreviousVersion; prev != "" {
		fmt.Fprintf(w, "since %s: added %s; removed %s; changed %s\n", printable(prev), refList(d.Diff.Added), refList(d.Diff.Removed), changedList(d.Diff.Changed))
	}
	_, err := fmt.Fprintf(w, "next: an org admin approves it: xema grant create --biome %s --version %s\n", printable(r.BiomeID), printable(r.Version))
	return err
}

func refList(refs []string) string {
	if len(refs) == 0 {
		return "none"
	}
	return printable(strings.Join(refs, ", "))
}

func changedList(changes []grant.Change) string {
	refs := make([]string, len(changes))
	for i, c := range changes {
		refs[i] = c.Ref + " (" + strings.Join(slices.Sorted(maps.Keys(c.Fields)), ", ") + ")"
	}
	return refList(refs)
}

// readSubmission sends the files as written: the gateway validates them again.
func readSubmission(dir string) (catalog.Submission, error) {
	var sub catalog.Submission
	raw, err := os.ReadFile(filepath.Join(dir, "biome.json"))
	if err != nil {
		return sub, err
	}
	sub.Manifest = raw
	files, err := filepath.Glob(filepath.Join(dir, "contributions", "*.capability.contribution.json"))
	if err != nil {
		return sub, err
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return sub, err
		}
		sub.Contributions = append(sub.Contributions, raw)
	}
	if sub.Contributions == nil {
		sub.Contributions = []json.RawMessage{}
	}
	return sub, nil
}
