package main

import (
	"errors"
	"net/url"

	"github.com/spf13/cobra"
)

// newMCPServerCmd is `xema mcp-server`.
func newMCPServerCmd() *cobra.Command {
	var api adminFlags
	root := &cobra.Command{Use: "mcp-server", Short: "Register, list and re-sync external MCP servers"}
	api.addTo(root.PersistentFlags())
	call := api.call

	var reg struct {
		URL, Auth                        string
		Owner, ClientID, ClientSecretRef string
		Scopes                           []string
		Stdio                            bool
		TimeoutMs                        int
	}
	register := &cobra.Command{
		Use:   "register PROVIDER-ID",
		Short: "Register a server (--url for streamable HTTP, --stdio for one the operator declared) and print its tools and digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reg.Auth != "oauth" && (reg.Owner != "" || reg.ClientID != "" || reg.ClientSecretRef != "" || len(reg.Scopes) > 0) {
				return &exitError{code: 2, err: errors.New("--owner, --client-id, --client-secret-ref and --scope go with --auth oauth only")}
			}
			body := map[string]any{"providerId": args[0]}
			if reg.Stdio {
				body["transport"] = "stdio"
			} else {
				body["transport"], body["url"] = "streamable-http", reg.URL
			}
			if reg.Auth != "" {
				auth := map[string]any{"kind": reg.Auth}
				for k, v := range map[string]string{"owner": reg.Owner, "clientId": reg.ClientID, "clientSecretRef": reg.ClientSecretRef} {
					if v != "" {
						auth[k] = v
					}
				}
				if len(reg.Scopes) > 0 {
					auth["scopes"] = reg.Scopes
				}
				body["auth"] = auth
			}
			if reg.TimeoutMs > 0 {
				body["timeoutMs"] = reg.TimeoutMs
			}
			return call(cmd, "POST", "/v1/mcp-servers", body)
		},
	}
	f := register.Flags()
	f.StringVar(&reg.URL, "url", "", "streamable-HTTP endpoint, e.g. https://mcp.example.com/mcp")
	f.BoolVar(&reg.Stdio, "stdio", false, "register the stdio server the operator declared under PROVIDER-ID (xema serve --mcp-stdio)")
	f.StringVar(&reg.Auth, "auth", "", "auth kind: service-token (the gateway's outbound token) or oauth (a connection's token: see xema connection)")
	f.StringVar(&reg.Owner, "owner", "", "with --auth oauth: whose account calls use, org (one connection an org admin makes) or user (each person's own)")
	f.StringVar(&reg.ClientID, "client-id", "", "with --auth oauth: a client pre-registered at the server's authorization server (default: the gateway registers itself)")
	f.StringVar(&reg.ClientSecretRef, "client-secret-ref", "", "with --client-id: the id of the stored credential holding its secret (xema credential create)")
	f.StringSliceVar(&reg.Scopes, "scope", nil, "with --auth oauth: a scope to ask for; repeatable (default: the server's scopes_supported)")
	f.IntVar(&reg.TimeoutMs, "timeout-ms", 0, "timeout of tools/list and each tools/call (default 10000)")
	register.MarkFlagsOneRequired("url", "stdio")
	register.MarkFlagsMutuallyExclusive("url", "stdio")

	list := &cobra.Command{
		Use: "list", Short: "List registered servers with their pinned tools", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return call(cmd, "GET", "/v1/mcp-servers", nil) },
	}
	sync := &cobra.Command{
		Use: "sync PROVIDER-ID", Short: "Re-read a server's tools: changed tools go back to seeded", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, "POST", "/v1/mcp-servers/"+url.PathEscape(args[0])+"/sync", map[string]any{})
		},
	}
	root.AddCommand(register, list, sync)
	return root
}
