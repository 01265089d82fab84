package main

import (
	"encoding/json"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xemahq/xema/internal/client"
)

// adminFlags are the gateway URL and bearer token of the commands that call the HTTP API.
type adminFlags struct{ server, token string }

func (f *adminFlags) add(cmd *cobra.Command) { f.addTo(cmd.Flags()) }

func (f *adminFlags) addTo(fs *pflag.FlagSet) {
	fs.StringVar(&f.server, "server", "http://127.0.0.1:8181", "gateway URL")
	fs.StringVar(&f.token, "token", "", "bearer token")
}

// client checks the flags and returns the gateway client; bad flags are a usage error.
func (f *adminFlags) client() (*client.Client, error) {
	c, err := client.New(f.server, f.token)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return c, nil
}

// call sends one request and prints the answer as indented JSON.
func (f *adminFlags) call(cmd *cobra.Command, method, path string, body any) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	var out json.RawMessage
	if err := c.Do(cmd.Context(), method, path, body, &out); err != nil {
		return err
	}
	return writeJSON(cmd.OutOrStdout(), out)
}
