package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/identity"
)

// newDevCmd is `xema dev`.
func newDevCmd() *cobra.Command {
	dev := &cobra.Command{Use: "dev", Short: "Development helpers (the development issuer)"}
	dev.AddCommand(newDevTokenCmd())
	return dev
}

func newDevTokenCmd() *cobra.Command {
	var (
		dataDir string
		c       identity.DevClaims
	)
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print a token that 'xema serve' with the same --data-dir accepts",
		Long: `Print a development token signed with the key under --data-dir/issuer/ (created on first
use), which 'xema serve --data-dir DIR' without --issuer verifies like any other token.
Without --armed the token is armed for every capability.`,
		Example:       `  xema dev token --data-dir .xema --subject agent:support-bot --env project --armed 'kb:*'`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("armed") {
				c.Armed = nil
			}
			if err := c.Validate(); err != nil {
				return &exitError{code: 2, err: err}
			}
			iss, err := identity.OpenIssuer(dataDir, "")
			if err != nil {
				return err
			}
			tok, err := iss.Mint(c)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".xema", "data directory of the server that must accept the token")
	f.StringVar(&c.Subject, "subject", "", "subject KIND:NAME, KIND one of user|agent|workflow|service (required)")
	f.StringVar(&c.Environment, "env", "", "environment the call runs in (required)")
	f.StringArrayVar(&c.Groups, "group", nil, "group (repeatable)")
	f.StringArrayVar(&c.Roles, "role", nil, "role (repeatable)")
	f.StringVar(&c.OrgRole, "org-role", "", "org role: org_owner|org_admin|org_member")
	f.StringVar(&c.Org, "org", "", "org")
	f.StringVar(&c.Project, "project", "", "project")
	f.StringVar(&c.Session, "session", "", "session id")
	f.StringArrayVar(&c.Armed, "armed", nil, "ref glob the caller is armed for, e.g. 'acme:*' (repeatable; default: all)")
	f.StringArrayVar(&c.Actors, "act", nil, "an actor KIND:NAME acting for --subject (repeatable: the act chain, outermost first)")
	f.StringArrayVar(&c.MayAct, "may-act", nil, "an actor KIND:NAME the subject allows to act for them (repeatable; the may_act claim)")
	f.DurationVar(&c.TTL, "ttl", time.Hour, "lifetime, > 0 and <= 24h")
	_ = cmd.MarkFlagRequired("subject")
	_ = cmd.MarkFlagRequired("env")
	return cmd
}
