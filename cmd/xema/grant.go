package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/client"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/timearg"
)

// newGrantCmd is `xema grant`.
func newGrantCmd() *cobra.Command {
	var (
		api    adminFlags
		format string
	)
	root := &cobra.Command{Use: "grant", Short: "Approve a biome version's permission digest for your org, and list the grants"}
	api.addTo(root.PersistentFlags())
	root.PersistentFlags().StringVar(&format, "format", "text", "text or json")

	var c struct {
		biome, version, digest, profile string
		customizeFlags
		dryRun bool
		since  string
	}
	create := &cobra.Command{
		Use:   "create",
		Short: "Approve a biome version (its digest is read from the gateway unless --digest is given)",
		// The environments prod and staging are those `xema serve --environments prod=project,staging=project`
		// names (docs/profiles.md); TestNamedEnvironments runs this example as written.
		Example: `  xema grant create --biome ticketing --version 1.0.0 --profile internal-agent \
    --env ticket:create@1=prod,staging --subject ticket:create@1=group:support \
    --rate ticket:create@1=60/1m --require-approval ticket:create@1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := api.client()
			if err != nil {
				return err
			}
			// The flags first: a usage error costs no request.
			req := grant.Request{BiomeID: c.biome, Version: c.version, DigestHash: c.digest, Profile: c.profile}
			if req.Customize, err = c.customization(); err != nil {
				return &exitError{code: 2, err: err}
			}
			if c.since != "" && !c.dryRun {
				return &exitError{code: 2, err: fmt.Errorf("--since needs --dry-run")}
			}
			if c.since, err = window(c.since); err != nil {
				return err
			}
			if req.DigestHash == "" {
				var bv struct {
					Digest struct {
						Hash string `json:"hash"`
					} `json:"digest"`
				}
				path := "/v1/biomes/" + url.PathEscape(c.biome) + "/" + url.PathEscape(c.version)
				if err := cl.Do(cmd.Context(), http.MethodGet, path, nil, &bv); err != nil {
					return err
				}
				req.DigestHash = bv.Digest.Hash
			}
			if c.dryRun {
				return dryRunGrant(cmd, cl, req, c.since, format)
			}
			var g admin.GrantView
			if err := cl.Do(cmd.Context(), http.MethodPost, "/v1/grants", req, &g); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), g)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "grant %s: %s@%s (digest %s), profile %s, approved by %s\n",
				printable(g.GrantID), printable(g.BiomeID), printable(g.Version), printable(g.DigestHash), printable(g.Profile), printable(g.ApprovedBy))
			return nil
		},
	}
	fl := create.Flags()
	fl.StringVar(&c.biome, "biome", "", "biome id (required)")
	fl.StringVar(&c.version, "version", "", "biome version (required)")
	fl.StringVar(&c.digest, "digest", "", "the digest hash you reviewed (default: the gateway's digest of the version)")
	fl.StringVar(&c.profile, "profile", "", "permission profile (default: the biome's defaultProfile)")
	c.add(fl)
	fl.BoolVar(&c.dryRun, "dry-run", false, "record nothing: print the grant it would record and its impact over the org's recorded calls")
	fl.StringVar(&c.since, "since", "", "with --dry-run: replay the calls recorded since then until now: RFC 3339, or a duration ago such as 24h (default 168h)")
	_ = create.MarkFlagRequired("biome")
	_ = create.MarkFlagRequired("version")

	var biomeID string
	list := &cobra.Command{
		Use:   "list",
		Short: "List your org's grants, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := api.client()
			if err != nil {
				return err
			}
			path := "/v1/grants"
			if biomeID != "" {
				path += "?biomeId=" + url.QueryEscape(biomeID)
			}
			var out struct {
				Grants []admin.GrantView `json:"grants"`
			}
			if err := cl.Do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "GRANT\tBIOME\tVERSION\tPROFILE\tSTATUS\tAPPROVED BY\tAPPROVED AT\tSINCE")
			for _, g := range out.Grants {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(g.GrantID), printable(g.BiomeID), printable(g.Version),
					printable(g.Profile), printable(g.Status), printable(g.ApprovedBy), printable(g.ApprovedAt), printable(grantSince(g)))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&biomeID, "biome", "", "only grants of this biome")
	root.AddCommand(create, list, newGrantRevokeCmd(&api, &format), newGrantChangeCmd(&api, &format))
	return root
}

// grantSince says what moved a grant out of active: who revoked it when, or its successor.
func grantSince(g admin.GrantView) string {
	switch g.Status {
	case "revoked":
		return "revoked by " + g.RevokedBy + " at " + g.RevokedAt
	case "superseded":
		return "superseded by " + g.SupersededBy
	}
	return "-"
}

// newGrantRevokeCmd is `xema grant revoke ID`: it first shows what revoking would deny of the
// org's recorded calls (DELETE /v1/grants/{id}?dryRun=true), then revokes once confirmed: an
// answer y on the terminal, or --yes for scripts.
func newGrantRevokeCmd(api *adminFlags, format *string) *cobra.Command {
	var (
		dryRun, yes bool
		since       string
	)
	cmd := &cobra.Command{
		Use:   "revoke GRANT_ID",
		Short: "Revoke an active grant of your org: shows what it would deny, then revokes once confirmed (--yes for scripts)",
		Long: `Revoke takes the grant's biome's capabilities away from your org and withdraws the calls held
under it. It first prints the grant and what revoking it would deny of your org's recorded calls,
then asks for confirmation (y); --yes revokes without asking, --dry-run only shows. Without a
confirmation nothing is revoked and the command exits 1.`,
		Example: `  xema grant revoke g_123 --dry-run
  xema grant revoke g_123 --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dryRun && yes {
				return &exitError{code: 2, err: errors.New("--dry-run and --yes exclude each other")}
			}
			cl, err := api.client()
			if err != nil {
				return err
			}
			if since, err = window(since); err != nil {
				return err
			}
			path := "/v1/grants/" + url.PathEscape(args[0])
			dry := path + "?dryRun=true"
			if since != "" {
				dry += "&since=" + url.QueryEscape(since)
			}
			var preview admin.RevokeDryRunView
			if err := cl.Do(cmd.Context(), http.MethodDelete, dry, nil, &preview); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun && *format == "json" {
				return writeJSON(out, preview)
			}
			switch {
			case *format != "json":
				printRevoke(out, preview)
			case !yes:
				printRevoke(cmd.ErrOrStderr(), preview) // stdout keeps to the JSON answer
			}
			if dryRun {
				fmt.Fprintln(out, "dry run: nothing revoked")
				return nil
			}
			if !yes && !confirm(cmd, fmt.Sprintf("revoke grant %s? [y/N] ", printable(preview.GrantID))) {
				return &exitError{code: 1, err: errors.New("not confirmed: nothing revoked (answer y, or give --yes)")}
			}
			var g admin.GrantView
			if err := cl.Do(cmd.Context(), http.MethodDelete, path, nil, &g); err != nil {
				return err
			}
			if *format == "json" {
				return writeJSON(out, g)
			}
			fmt.Fprintf(out, "grant %s (%s@%s) revoked by %s at %s\n", printable(g.GrantID), printable(g.BiomeID), printable(g.Version), printable(g.RevokedBy), printable(g.RevokedAt))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&dryRun, "dry-run", false, "only show the grant and what revoking it would deny")
	fl.BoolVar(&yes, "yes", false, "revoke without asking (for scripts)")
	fl.StringVar(&since, "since", "", "replay the calls recorded since then until now for the impact: RFC 3339, or a duration ago such as 24h (default 168h)")
	return cmd
}

// printRevoke prints a revoke's preview: the grant and who would lose what.
func printRevoke(w io.Writer, v admin.RevokeDryRunView) {
	fmt.Fprintf(w, "grant %s: %s@%s, profile %s, approved by %s\n", printable(v.GrantID), printable(v.BiomeID), printable(v.Version), printable(v.Profile), printable(v.ApprovedBy))
	fmt.Fprintf(w, "revoking it, of the %d calls recorded since %s, would deny %d allowed ones\n", v.Impact.Considered, v.Impact.Since, v.Impact.AllowToDeny)
	for _, c := range v.Impact.Losing {
		fmt.Fprintf(w, "  %s: %d call(s)\n", printable(c.Subject), c.Calls)
	}
}

// confirm asks question on stderr and reads one line of stdin: true only for y or yes. A
// closed stdin (a script) is no.
func confirm(cmd *cobra.Command, question string) bool {
	fmt.Fprint(cmd.ErrOrStderr(), question)
	answer, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true
	}
	fmt.Fprintln(cmd.ErrOrStderr())
	return false
}

// newGrantChangeCmd is `xema grant change ID`: it always shows the diff and the dry-run impact
// first (POST /v1/grants/{id}/change?dryRun=true), and records the change only with --yes.
func newGrantChangeCmd(api *adminFlags, format *string) *cobra.Command {
	var c struct {
		profile string
		customizeFlags
		clearCustomize, yes bool
		since               string
	}
	cmd := &cobra.Command{
		Use:   "change GRANT_ID",
		Short: "Change an active grant (profile, customization): shows the diff and its impact, records it with --yes",
		Long: `Change records a new grant of the same biome version that supersedes GRANT_ID. The
customization flags replace the grant's whole customization; without them it is kept
(--clear-customize drops it). The diff and the dry-run impact over your org's recorded calls are
printed first; nothing is recorded without --yes.`,
		Example: `  xema grant change g-123 --profile read-only-assistant
  xema grant change g-123 --env ticketing:ticket.create@1=project --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := api.client()
			if err != nil {
				return err
			}
			body := map[string]any{}
			if c.profile != "" {
				body["profile"] = c.profile
			}
			custom, err := c.customization()
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			switch {
			case c.clearCustomize && custom != nil:
				return &exitError{code: 2, err: fmt.Errorf("--clear-customize and customization flags exclude each other")}
			case c.clearCustomize:
				body["customize"] = map[string]any{}
			case custom != nil:
				body["customize"] = custom
			}
			if c.since, err = window(c.since); err != nil {
				return err
			}
			path := "/v1/grants/" + url.PathEscape(args[0]) + "/change"
			dry := path + "?dryRun=true"
			if c.since != "" {
				dry += "&since=" + url.QueryEscape(c.since)
			}
			var preview admin.ChangeView
			if err := cl.Do(cmd.Context(), http.MethodPost, dry, body, &preview); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !c.yes {
				if *format == "json" {
					return writeJSON(out, preview)
				}
				printChange(out, preview)
				fmt.Fprintln(out, "nothing recorded: run again with --yes to record this change")
				return nil
			}
			var done admin.ChangeView
			if err := cl.Do(cmd.Context(), http.MethodPost, path, body, &done); err != nil {
				return err
			}
			done.Impact = preview.Impact
			if *format == "json" {
				return writeJSON(out, done)
			}
			printChange(out, done)
			fmt.Fprintf(out, "grant %s recorded; it supersedes grant %s\n", done.Grant.GrantID, done.Replaces.GrantID)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&c.profile, "profile", "", "the new permission profile (default: the grant's own)")
	c.add(fl)
	fl.BoolVar(&c.clearCustomize, "clear-customize", false, "drop the grant's customization")
	fl.BoolVar(&c.yes, "yes", false, "record the change after showing it")
	fl.StringVar(&c.since, "since", "", "replay the calls recorded since then until now for the impact: RFC 3339, or a duration ago such as 24h (default 168h)")
	return cmd
}

// window turns a --since of a dry run (a time or a duration ago) into the duration the API
// takes; "" stays "" (the API's default).
func window(since string) (string, error) {
	if since == "" {
		return "", nil
	}
	d, err := timearg.Ago(since, time.Now())
	if err != nil {
		return "", &exitError{code: 2, err: fmt.Errorf("--since %w", err)}
	}
	return fmt.Sprintf("%ds", int64(d/time.Second)), nil
}

// printChange writes a change's diff and impact.
func printChange(w io.Writer, v admin.ChangeView) {
	fmt.Fprintf(w, "change of grant %s (%s@%s):\n", v.Replaces.GrantID, v.Replaces.BiomeID, v.Replaces.Version)
	for _, d := range v.Diff {
		fmt.Fprintf(w, "  %s: %s -> %s\n", d.Path, orNone(d.From), orNone(d.To))
	}
	if v.Impact != nil {
		printImpact(w, *v.Impact)
	}
}

// printImpact writes what a grant's dry run would change over the org's recorded calls.
func printImpact(w io.Writer, imp catalog.Impact) {
	fmt.Fprintf(w, "impact over the calls recorded since %s: %d considered, %d allowed would be denied, %d allowed would be held for approval, %d denied would be allowed\n",
		imp.Since, imp.Considered, imp.AllowToDeny, imp.AllowToHeld, imp.DenyToAllow)
}

func orNone(raw []byte) string {
	if len(raw) == 0 {
		return "(none)"
	}
	return string(raw)
}

// dryRunGrant is `xema grant create --dry-run`: POST /v1/grants?dryRun=true, nothing recorded.
func dryRunGrant(cmd *cobra.Command, cl *client.Client, req grant.Request, since, format string) error {
	path := "/v1/grants?dryRun=true"
	if since != "" {
		path += "&since=" + url.QueryEscape(since)
	}
	var v admin.DryRunView
	if err := cl.Do(cmd.Context(), http.MethodPost, path, req, &v); err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(cmd.OutOrStdout(), v)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "dry run (nothing recorded): %s@%s (digest %s), profile %s\n", printable(v.BiomeID), printable(v.Version), printable(v.DigestHash), printable(v.Profile))
	printImpact(out, v.Impact)
	return nil
}

// customization builds the grant's per-capability customization from REF=VALUE flags.
// customizeFlags are the per-capability customization flags grant create and grant change share.
type customizeFlags struct {
	envs, subjects, resources, rates, quotas, approval, noApproval []string
}

func (c *customizeFlags) add(fl *pflag.FlagSet) {
	fl.StringArrayVar(&c.envs, "env", nil, "REF=ENV[,ENV...]: environments of one capability")
	fl.StringArrayVar(&c.subjects, "subject", nil, "REF=SUBJECT[,SUBJECT...]: subjects (agent:x, group:g, role:r, user:u) of one capability")
	fl.StringArrayVar(&c.resources, "resource", nil, "REF=GLOB[,GLOB...]: resource globs of one capability")
	fl.StringArrayVar(&c.rates, "rate", nil, "REF=N/PER: rate limit of one capability, e.g. 60/1m")
	fl.StringArrayVar(&c.quotas, "quota", nil, "REF=N/PER: quota of one capability, e.g. 1000/24h")
	fl.StringArrayVar(&c.approval, "require-approval", nil, "REF: calls of this capability wait for a person")
	fl.StringArrayVar(&c.noApproval, "no-approval", nil, "REF: calls of this capability do not wait for a person")
}

func (c *customizeFlags) customization() (map[string]grant.Customization, error) {
	envs, subjects, resources, rates, quotas, approval, noApproval := c.envs, c.subjects, c.resources, c.rates, c.quotas, c.approval, c.noApproval
	out := map[string]grant.Customization{}
	at := func(ref string) grant.Customization { return out[ref] }
	pairs := func(flag string, vals []string, set func(ref, v string) error) error {
		for _, kv := range vals {
			ref, v, ok := strings.Cut(kv, "=")
			if !ok || ref == "" || v == "" {
				return fmt.Errorf("--%s %q: want REF=VALUE", flag, kv)
			}
			if err := set(ref, v); err != nil {
				return fmt.Errorf("--%s %q: %w", flag, kv, err)
			}
		}
		return nil
	}
	list := func(v string) []string { return strings.Split(v, ",") }
	limit := func(v string) (*grant.Limit, error) {
		n, per, ok := strings.Cut(v, "/")
		count, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, fmt.Errorf("want N/PER such as 60/1m")
		}
		return &grant.Limit{Requests: count, Per: per}, nil
	}
	steps := []error{
		pairs("env", envs, func(ref, v string) error { c := at(ref); c.Environments = list(v); out[ref] = c; return nil }),
		pairs("subject", subjects, func(ref, v string) error { c := at(ref); c.Subjects = list(v); out[ref] = c; return nil }),
		pairs("resource", resources, func(ref, v string) error { c := at(ref); c.Resources = list(v); out[ref] = c; return nil }),
		pairs("rate", rates, func(ref, v string) error {
			l, err := limit(v)
			c := at(ref)
			c.RateLimit = l
			out[ref] = c
			return err
		}),
		pairs("quota", quotas, func(ref, v string) error {
			l, err := limit(v)
			c := at(ref)
			c.Quota = l
			out[ref] = c
			return err
		}),
	}
	for _, err := range steps {
		if err != nil {
			return nil, err
		}
	}
	for _, a := range []struct {
		refs []string
		v    bool
	}{{approval, true}, {noApproval, false}} {
		for _, ref := range a.refs {
			c := at(ref)
			v := a.v
			c.RequiresApproval = &v
			out[ref] = c
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
