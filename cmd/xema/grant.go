package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/client"
	"github.com/xemahq/xema/internal/grant"
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
		biome, version, digest, profile          string
		envs, subjects, resources, rates, quotas []string
		approval, noApproval                     []string
		dryRun                                   bool
		since                                    string
	}
	create := &cobra.Command{
		Use:   "create",
		Short: "Approve a biome version (its digest is read from the gateway unless --digest is given)",
		Example: `  xema grant create --biome ticketing --version 1.0.0 --profile internal-agent \
    --env ticketing:ticket.create@1=prod,staging --subject ticketing:ticket.create@1=group:support \
    --rate ticketing:ticket.create@1=60/1m --require-approval ticketing:ticket.create@1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := api.client()
			if err != nil {
				return err
			}
			// The flags first: a usage error costs no request.
			req := grant.Request{BiomeID: c.biome, Version: c.version, DigestHash: c.digest, Profile: c.profile}
			if req.Customize, err = customization(c.envs, c.subjects, c.resources, c.rates, c.quotas, c.approval, c.noApproval); err != nil {
				return &exitError{code: 2, err: err}
			}
			if c.since != "" && !c.dryRun {
				return &exitError{code: 2, err: fmt.Errorf("--since needs --dry-run")}
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
	fl.StringArrayVar(&c.envs, "env", nil, "REF=ENV[,ENV...]: environments of one capability")
	fl.StringArrayVar(&c.subjects, "subject", nil, "REF=SUBJECT[,SUBJECT...]: subjects (agent:x, group:g, role:r, user:u) of one capability")
	fl.StringArrayVar(&c.resources, "resource", nil, "REF=GLOB[,GLOB...]: resource globs of one capability")
	fl.StringArrayVar(&c.rates, "rate", nil, "REF=N/PER: rate limit of one capability, e.g. 60/1m")
	fl.StringArrayVar(&c.quotas, "quota", nil, "REF=N/PER: quota of one capability, e.g. 1000/24h")
	fl.StringArrayVar(&c.approval, "require-approval", nil, "REF: calls of this capability wait for a person")
	fl.StringArrayVar(&c.noApproval, "no-approval", nil, "REF: calls of this capability do not wait for a person")
	fl.BoolVar(&c.dryRun, "dry-run", false, "record nothing: print the grant it would record and its impact over the org's recorded calls")
	fl.StringVar(&c.since, "since", "", "with --dry-run: replay the calls recorded this long ago until now, e.g. 24h (default 168h)")
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
			fmt.Fprintln(tw, "GRANT\tBIOME\tVERSION\tPROFILE\tAPPROVED BY\tAPPROVED AT")
			for _, g := range out.Grants {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(g.GrantID), printable(g.BiomeID), printable(g.Version),
					printable(g.Profile), printable(g.ApprovedBy), g.ApprovedAt)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&biomeID, "biome", "", "only grants of this biome")
	root.AddCommand(create, list)
	return root
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
	fmt.Fprintf(out, "impact over the calls recorded since %s: %d considered, %d allowed would be denied, %d denied would be allowed\n",
		v.Impact.Since, v.Impact.Considered, v.Impact.AllowToDeny, v.Impact.DenyToAllow)
	return nil
}

// customization builds the grant's per-capability customization from REF=VALUE flags.
func customization(envs, subjects, resources, rates, quotas, approval, noApproval []string) (map[string]grant.Customization, error) {
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
