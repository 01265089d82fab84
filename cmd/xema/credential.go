package main

import (
	"bufio"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store/engine"
)

// newCredentialCmd is `xema credential`.
func newCredentialCmd() *cobra.Command {
	credCmd := &cobra.Command{Use: "credential", Short: "Manage brokered provider credentials (write-only over the API)"}

	var create adminFlags
	var name, provider string
	createCmd := &cobra.Command{
		Use:     "create",
		Short:   "Store a provider credential read from stdin; prints its id and metadata, never the secret",
		Example: `  printf %s "$GITEA_TOKEN" | xema credential create --token $ADMIN --provider gitea --name ci`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// From stdin, never a flag: a flag would land in shell history and ps output.
			secret, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			secret = strings.TrimRight(secret, "\r\n")
			if secret == "" {
				return &exitError{code: 2, err: fmt.Errorf("no secret on stdin (%v)", err)}
			}
			return create.call(cmd, http.MethodPost, "/v1/credentials",
				map[string]string{"name": name, "provider": provider, "secret": secret})
		},
	}
	create.add(createCmd)
	createCmd.Flags().StringVar(&name, "name", "", "a name to recognise the credential by")
	createCmd.Flags().StringVar(&provider, "provider", "", "github | gitlab | gitea | slack | telegram")

	var list adminFlags
	listCmd := &cobra.Command{Use: "list", Short: "List the org's credentials (metadata only)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return list.call(cmd, http.MethodGet, "/v1/credentials", nil)
		}}
	list.add(listCmd)

	var del adminFlags
	deleteCmd := &cobra.Command{Use: "delete ID", Short: "Delete a credential no binding uses", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return del.call(cmd, http.MethodDelete, "/v1/credentials/"+url.PathEscape(args[0]), nil)
		}}
	del.add(deleteCmd)

	var dsn, dataDir string
	var prune bool
	var mf masterFlags
	rotateCmd := &cobra.Command{
		Use:   "rotate-key",
		Short: "Put a new key first in the credential keyring and reseal every credential, connection and client secret under it",
		Long: `With the keyring file (DATA_DIR/secret.key or XEMA_SECRET_KEY_FILE), rotate-key adds a new key
first, keeps the old ones so running gateways still open everything, and reseals under the new
key every credential, every connection's tokens and every OAuth MCP server's client secret, each
kind in one transaction; --prune then drops the old keys, only once every kind is resealed (a
kind that fails is left as it was, the old keys kept: run rotate-key again). Running gateways
re-read the file when it changes. With XEMA_SECRET_KEY, list the new key first there and run
rotate-key to reseal; remove the old key afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := engine.Open(cmd.Context(), storeDSN(dsn), dataDir)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			defer st.Close()
			master, err := mf.open(dataDir)
			if err != nil {
				return err
			}
			keys, err := credential.OpenKeys(dataDir, secretbox.SourceFromEnv(os.Getenv), master)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			v := &credential.Vault{Store: st, Keys: keys}
			rot, err := v.Rotate(cmd.Context(), prune, connection.Resealers(st)...)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resealed %s under key %s\n", rot, rot.KeyID)
			return nil
		},
	}
	rotateCmd.Flags().StringVar(&dsn, "store", "", "store: empty for SQLite under --data-dir, sqlite:PATH, or postgres://... (also XEMA_STORE)")
	rotateCmd.Flags().StringVar(&dataDir, "data-dir", ".xema", "data directory (the keyring file and the embedded SQLite store)")
	rotateCmd.Flags().BoolVar(&prune, "prune", false, "after resealing, drop every key but the new one from the keyring file")
	mf.add(rotateCmd)

	credCmd.AddCommand(createCmd, listCmd, deleteCmd, rotateCmd)
	return credCmd
}
