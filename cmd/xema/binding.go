package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/binding"
)

// newBindingCmd is `xema binding`.
func newBindingCmd() *cobra.Command {
	bindingCmd := &cobra.Command{Use: "binding", Short: "Manage org-level provider bindings (POST/GET/DELETE /v1/bindings)"}

	var create adminFlags
	var spec binding.Spec
	var config string
	createCmd := &cobra.Command{
		Use:   "create",
		Short: "Bind the refs matching a pattern to a provider, base URL and stored credential",
		Example: `  xema binding create --token $ADMIN --project p1 --environment project --ref-pattern 'connector:scm.*' \
    --provider gitea --base-url https://git.example.com --credential cred_... --config '{"repository":"acme/app"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config != "" {
				if !json.Valid([]byte(config)) {
					return &exitError{code: 2, err: fmt.Errorf("--config is not a JSON object")}
				}
				spec.Config = json.RawMessage(config)
			}
			return create.call(cmd, http.MethodPost, "/v1/bindings", spec)
		},
	}
	create.add(createCmd)
	f := createCmd.Flags()
	f.StringVar(&spec.Project, "project", "", "limit the binding to one project (default: every project of the org)")
	f.StringVar(&spec.Environment, "environment", "", "limit the binding to one environment (default: every environment)")
	f.StringVar(&spec.RefPattern, "ref-pattern", "", "ref glob the binding serves, e.g. 'connector:scm.*'")
	f.StringVar(&spec.Conversation, "conversation", "", "chat only: the conversation this binding serves")
	f.StringVar(&spec.Provider, "provider", "", "github | gitlab | gitea | slack | telegram")
	f.StringVar(&spec.BaseURL, "base-url", "", "the provider's API base URL")
	f.StringVar(&spec.CredentialID, "credential", "", "id of a stored credential (xema credential create)")
	f.StringVar(&config, "config", "", `provider settings as JSON, e.g. '{"repository":"owner/name"}' or '{"chatId":"-100123"}'`)
	f.StringVar(&spec.Replaces, "replaces", "", "id of a binding this one takes the place of, in one step (a change)")

	var list adminFlags
	listCmd := &cobra.Command{Use: "list", Short: "List the org's bindings", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return list.call(cmd, http.MethodGet, "/v1/bindings", nil) }}
	list.add(listCmd)

	var del adminFlags
	deleteCmd := &cobra.Command{Use: "delete ID", Short: "Delete a binding", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return del.call(cmd, http.MethodDelete, "/v1/bindings/"+url.PathEscape(args[0]), nil)
		}}
	del.add(deleteCmd)

	bindingCmd.AddCommand(createCmd, listCmd, deleteCmd)
	return bindingCmd
}
