package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/replay"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/engine"
	"github.com/xemahq/xema/internal/timearg"
)

// storeFlags name the store a command reads directly (not through a running gateway).
type storeFlags struct{ dsn, dataDir string }

func (f *storeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dsn, "store", "", "store: empty for SQLite under --data-dir, sqlite:PATH, or postgres://... (also XEMA_STORE)")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", ".xema", "data directory of the embedded SQLite store")
}

// storeDSN is the one place the store's DSN is read: the --store flag, else XEMA_STORE.
func storeDSN(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("XEMA_STORE")
}

func (f *storeFlags) open(ctx context.Context) (store.Store, error) {
	st, err := engine.Open(ctx, storeDSN(f.dsn), f.dataDir)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return st, nil
}

// newReplayCmd is `xema replay`.
func newReplayCmd() *cobra.Command {
	var sf storeFlags
	var until time.Duration
	var since, untilAt, policyDir, bundleFile, format, org, config string
	var environments []string
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Re-decide recorded calls with a candidate policy and report what would change",
		Long: `replay re-evaluates every decision the audit log recorded in the window with a candidate
policy: the built-in Rego plus --policy-dir (platform Rego added or changed) over the store's
current grants and the deployment's named environments (--environments, or xema serve's
--config file), or a whole --bundle. It reports the calls whose decision would change. It reads
the store and writes nothing, so it runs beside a serving gateway. Calls never authorized
(unauthenticated, unknown ref) are not considered; decisions recorded before the policy input
was kept are counted as not replayable.`,
		Example: `  xema replay --data-dir .xema --since 24h --policy-dir ./candidate --format json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return &exitError{code: 2, err: fmt.Errorf("--format %q: want text or json", format)}
			}
			if since == "" {
				return &exitError{code: 2, err: fmt.Errorf("--since: required, %s", timearg.Want)}
			}
			if policyDir != "" && bundleFile != "" {
				return &exitError{code: 2, err: fmt.Errorf("--policy-dir and --bundle: give one candidate")}
			}
			if bundleFile != "" && (len(environments) > 0 || config != "") {
				return &exitError{code: 2, err: fmt.Errorf("--bundle carries its own data, environments included: drop --environments and --config")}
			}
			now := time.Now()
			w := replay.Window{Org: org}
			var err error
			if w.Since, err = timearg.Parse(since, now); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--since %w", err)}
			}
			switch {
			case untilAt != "" && until != 0:
				return &exitError{code: 2, err: fmt.Errorf("--until and --until-ago: give one")}
			case untilAt != "":
				if w.Until, err = timearg.Parse(untilAt, now); err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--until %w", err)}
				}
			case until != 0:
				w.Until = now.Add(-until)
			}
			ctx := cmd.Context()
			st, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			envs, err := deploymentEnvironments(environments, config)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			d, err := candidate(ctx, st, envs, policyDir, bundleFile)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			start := time.Now()
			rep, err := replay.Run(ctx, st, d, w)
			if err != nil {
				return err
			}
			if unknown := undefinedEnvironments(rep, envs); len(unknown) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: recorded calls in environments replay does not define (%s) re-decide as denied; "+
					"name the deployment's environments with --environments or --config\n", strings.Join(unknown, ", "))
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			printReplay(cmd.OutOrStdout(), rep, time.Since(start))
			return nil
		},
	}
	sf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "start of the window (required): RFC 3339, or a duration ago such as 24h")
	f.DurationVar(&until, "until-ago", 0, "end of the window as a duration before now (default: now; --until takes one too)")
	f.StringVar(&untilAt, "until", "", "end of the window: RFC 3339, or a duration ago such as 1h (default: now)")
	f.StringVar(&policyDir, "policy-dir", "", "candidate platform Rego (package xema.custom) added to the built-in policy")
	f.StringVar(&bundleFile, "bundle", "", "candidate bundle file in OPA's format (gzipped tar) replacing the whole policy")
	f.StringVar(&org, "org", "", "only this org's calls (default: every org)")
	f.StringVar(&format, "format", "text", "text or json")
	f.StringSliceVar(&environments, "environments", nil, "NAME=KIND[,...]: the deployment's named environments beyond the defaults, as given to xema serve")
	f.StringVar(&config, "config", "", "xema serve's YAML config file: its environments are the deployment's (--environments overrides)")
	return cmd
}

// deploymentEnvironments are the named environments replay decides with: --environments, else
// the environments of xema serve's --config file, else the defaults. A deployment's recorded
// calls in an environment replay did not know would re-decide as denied (undefined).
func deploymentEnvironments(flag []string, config string) (grant.Environments, error) {
	if len(flag) == 0 && config != "" {
		raw, err := os.ReadFile(config)
		if err != nil {
			return grant.Environments{}, fmt.Errorf("--config: %w", err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return grant.Environments{}, fmt.Errorf("--config %s: %w", config, err)
		}
		// Only the environments key: the rest configures serve (and may name secrets replay
		// has no use for).
		fs := pflag.NewFlagSet("environments", pflag.ContinueOnError)
		fs.StringSliceVar(&flag, "environments", nil, "")
		if v, ok := doc["environments"]; ok {
			if err := applyKey(fs, "environments", v); err != nil {
				return grant.Environments{}, fmt.Errorf("--config %s: environments: %w", config, err)
			}
		}
	}
	envs, err := grant.ParseEnvironments(flag)
	if err != nil {
		return grant.Environments{}, fmt.Errorf("--environments: %w", err)
	}
	return envs, nil
}

// undefinedEnvironments are the environments of changed calls that envs does not name: the
// sign of a replay run without the deployment's environments.
func undefinedEnvironments(rep *replay.Report, envs grant.Environments) []string {
	var out []string
	for _, c := range rep.Changes {
		if _, ok := envs.Lookup(c.Environment); !ok && !slices.Contains(out, printable(c.Environment)) {
			out = append(out, printable(c.Environment))
		}
	}
	slices.Sort(out)
	return out
}

// candidate is the policy replay decides with: a bundle file, or the built-in Rego (plus
// platform Rego) over the store's current data.
func candidate(ctx context.Context, st catalog.Reader, envs grant.Environments, policyDir, bundleFile string) (replay.Decider, error) {
	if bundleFile != "" {
		f, err := os.Open(bundleFile)
		if err != nil {
			return nil, fmt.Errorf("--bundle: %w", err)
		}
		defer f.Close()
		return policy.FromBundle(ctx, f)
	}
	eng, err := policy.New(ctx, policy.Options{ExtraDir: policyDir})
	if err != nil {
		return nil, fmt.Errorf("--policy-dir: %w", err)
	}
	data, rev, err := app.PolicyData(ctx, st, envs)
	if err != nil {
		return nil, err
	}
	if err := eng.Load(ctx, data, rev); err != nil {
		return nil, err
	}
	return eng, nil
}

// printReplay writes the summary grouped by ref and reason, then the changed calls.
func printReplay(out io.Writer, rep *replay.Report, took time.Duration) {
	fmt.Fprintf(out, "considered %d decision(s) in %v: %d allow→deny, %d deny→allow, %d changed in all",
		rep.Considered, took.Round(time.Millisecond), rep.AllowToDeny, rep.DenyToAllow, len(rep.Changes))
	if rep.NotReplayable > 0 {
		fmt.Fprintf(out, "; %d recorded before replay existed (not replayable)", rep.NotReplayable)
	}
	if rep.PrunedBefore != "" {
		fmt.Fprintf(out, "; the window reaches pruned records: calls before %s are not replayed", rep.PrunedBefore)
	}
	fmt.Fprintln(out)
	if rep.Candidate != "" {
		fmt.Fprintf(out, "candidate policy revision %s\n", printable(rep.Candidate))
	}
	for _, r := range rep.Revisions {
		fmt.Fprintf(out, "recorded under revision %s: %d decision(s), %d changed\n", printable(r.Revision), r.Considered, r.Changed)
	}
	if len(rep.Changes) == 0 {
		return
	}
	groups := map[string]int{}
	for _, c := range rep.Changes {
		reasons := strings.Join(c.After.Reasons, ",")
		if c.After.Allow {
			reasons = "allowed"
		}
		groups[printable(c.Ref)+"\t"+printable(reasons)]++
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nREF\tAFTER\tCALLS")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%d\n", k, groups[k])
	}
	fmt.Fprintln(tw, "\nAUDIT ID\tTIME\tREVISION\tREF\tSUBJECT\tENVIRONMENT\tBEFORE\tAFTER")
	side := func(s replay.Side) string {
		if s.Allow {
			return "allow"
		}
		return "deny " + strings.Join(s.Reasons, ",")
	}
	for _, c := range rep.Changes {
		subject := c.Subject
		if c.OnBehalfOf != "" {
			subject += " for " + c.OnBehalfOf
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(c.AuditID), printable(c.Time), printable(c.Revision), printable(c.Ref), printable(subject),
			printable(c.Environment), printable(side(c.Before)), printable(side(c.After)))
	}
	tw.Flush()
}
