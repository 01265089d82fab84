package main

import (
	"encoding/json"
	"fmt"
	"net/url"

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
	var owner string
	connect := &cobra.Command{
		Use:   "connect PROVIDER-ID",
		Short: "Start connecting: prints the authorization URL to open in your browser; the gateway stores the tokens when you consent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"providerId": args[0]}
			if owner != "" {
				body["owner"] = owner
			}
			cl, err := api.client()
			if err != nil {
				return err
			}
			var started struct {
				URL       string `json:"url"`
				ExpiresAt string `json:"expiresAt"`
			}
			if err := cl.Do(cmd.Context(), "POST", "/v1/connections", body, &started); err != nil {
				return err
			}
			// The URL is to be opened as printed: not HTML-escaped (& as \u0026), as writeJSON
			// would print it.
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(started); err != nil {
				return fmt.Errorf("write JSON: %w", err)
			}
			return nil
		},
	}
	connect.Flags().StringVar(&owner, "owner", "", "org (the org's account; org admins only) or user (your own); default: the one the server takes")
	disconnect := &cobra.Command{
		Use: "disconnect CONNECTION-ID", Short: "Delete a connection and revoke its tokens at the authorization server", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, "DELETE", "/v1/connections/"+url.PathEscape(args[0]), nil)
		},
	}
	root.AddCommand(list, connect, disconnect)
	return root
}
