package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

// newConnectionCmd is `xema connection`: the caller's (and, for an org admin, the org's)
// connections to OAuth-protected MCP servers.
func newConnectionCmd() *cobra.Command {
	var api adminFlags
	root := &cobra.Command{Use: "connection", Short: "Connect your account (or the org's) to OAuth-protected MCP servers, list and disconnect"}
	api.addTo(root.PersistentFlags())
	call := api.call

	list := &cobra.Command{
		Use: "list", Short: "List the servers you can connect and the connections you may see (never a token)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return call(cmd, "GET", "/v1/connections", nil) },
	}
	connect := &cobra.Command{
		Use:   "connect PROVIDER-ID",
		Short: "Say where to connect your account (or the org's) to a server: the console's Connections page",
		Long: `A connection is finished in the browser that starts it (so nobody can have another person
complete a connection of theirs with that person's account): connect prints the console page to open,
after checking the server is one you can connect.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			var out struct {
				Servers []struct {
					ProviderID string `json:"providerId"`
					Owner      string `json:"owner"`
					Status     string `json:"status"`
				} `json:"servers"`
			}
			if err := c.Do(cmd.Context(), "GET", "/v1/connections", nil, &out); err != nil {
				return err
			}
			for _, s := range out.Servers {
				if s.ProviderID == args[0] {
					whose := "your own account"
					if s.Owner == "org" {
						whose = "the org's account (org admins only)"
					}
					cmd.Printf("Open %s/console/connections and press Connect on %s: it connects %s (now %s).\n",
						strings.TrimSuffix(api.serverURL(), "/"), s.ProviderID, whose, s.Status)
					return nil
				}
			}
			return &exitError{code: 1, err: fmt.Errorf("no OAuth-protected server %q you can connect in your org (xema connection list shows them)", args[0])}
		},
	}
	disconnect := &cobra.Command{
		Use: "disconnect CONNECTION-ID", Short: "Delete a connection and revoke its tokens at the authorization server", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, "DELETE", "/v1/connections/"+url.PathEscape(args[0]), nil)
		},
	}
	root.AddCommand(list, connect, disconnect)
	return root
}
