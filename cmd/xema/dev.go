package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/identity"
)

// newDevCmd is `xema dev`.
func newDevCmd() *cobra.Command {
	dev := &cobra.Command{Use: "dev", Short: "Development helpers (the development issuer)"}
	dev.AddCommand(newDevTokenCmd(), newDevIssuerCmd())
	return dev
}

// newDevIssuerCmd is `xema dev issuer`: the development issuer as a process of its own, an
// OpenID issuer a gateway verifies through --issuer like any other.
func newDevIssuerCmd() *cobra.Command {
	var addr, dataDir string
	cmd := &cobra.Command{
		Use:   "issuer",
		Short: "Serve a local OpenID issuer (discovery, JWKS, a token endpoint) for 'xema serve --issuer'",
		Long: `Serve the development issuer at http://ADDR: OpenID discovery
(/.well-known/openid-configuration), its JWKS (/.well-known/jwks.json) and a token endpoint
(POST /token, the fields of 'xema dev token'; 'xema dev token --issuer http://ADDR' asks it).
Its issuer (iss) is http://ADDR; its ES256 key lives under --data-dir/issuer/, created on first
use and kept, so tokens stay valid across restarts.

A stand-in for an identity provider on one machine: the token endpoint gives any token to
whoever asks, so it listens on loopback addresses only.`,
		Example: `  xema dev issuer --addr 127.0.0.1:8555 --data-dir issuer &
  xema serve --issuer http://127.0.0.1:8555 --audience xema ...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--addr %q: want HOST:PORT", addr)}
			}
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				return &exitError{code: 2, err: fmt.Errorf("--addr %q: the development issuer gives a token to whoever asks, so it listens on a loopback address only (127.0.0.1:PORT)", addr)}
			}
			iss, err := identity.OpenIssuer(dataDir, "http://"+addr)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("dev issuer: %w", err)
			}
			srv := &http.Server{Handler: iss.StandaloneHandler(), ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(shutdown)
			}()
			slog.Info("development issuer serving", "issuer", iss.Name(), "discovery", iss.Name()+identity.DiscoveryPath, "key", iss.KeyID())
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("dev issuer: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8555", "loopback address to listen on; the issuer is http://ADDR")
	cmd.Flags().StringVar(&dataDir, "data-dir", "issuer", "directory of the issuer's signing key (DIR/issuer/signing-key.pem)")
	return cmd
}

func newDevTokenCmd() *cobra.Command {
	var (
		dataDir, issuer string
		c               identity.DevClaims
	)
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print a token that 'xema serve' with the same --data-dir accepts",
		Long: `Print a development token signed with the key under --data-dir/issuer/ (created on first
use), which 'xema serve --data-dir DIR' without --issuer verifies like any other token. With
--issuer URL, ask the token endpoint of the 'xema dev issuer' at URL instead, for a gateway
running with --issuer URL. Without --armed the token is armed for every capability.`,
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
			if issuer != "" {
				if cmd.Flags().Changed("data-dir") {
					return &exitError{code: 2, err: errors.New("--issuer asks a running 'xema dev issuer' for the token: --data-dir does not apply")}
				}
				tok, err := identity.FetchDevToken(cmd.Context(), issuer, c)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), tok)
				return nil
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
	f.StringVar(&issuer, "issuer", "", "URL of a running 'xema dev issuer' to ask for the token (instead of --data-dir)")
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
