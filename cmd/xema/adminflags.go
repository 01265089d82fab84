package main

import (
	"cmp"
	"encoding/json"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xemahq/xema/internal/client"
)

// adminFlags are the gateway URL and bearer token of the commands that call the HTTP API.
type adminFlags struct{ server, token string }

// The environment variables standing in for --server and --token, so a shell session names the
// gateway and its token once. They are read when a command runs, never as a flag's default: a
// default would print the token in --help.
const (
	envServer     = "XEMA_SERVER"
	envToken      = "XEMA_TOKEN"
	defaultServer = "http://127.0.0.1:8181"
)

func (f *adminFlags) add(cmd *cobra.Command) { f.addTo(cmd.Flags()) }

func (f *adminFlags) addTo(fs *pflag.FlagSet) {
	fs.StringVar(&f.server, "server", "", "gateway URL (default $"+envServer+", else "+defaultServer+")")
	fs.StringVar(&f.token, "token", "", "bearer token (default $"+envToken+")")
}

// client checks the flags and returns the gateway client; bad flags are a usage error.
func (f *adminFlags) client() (*client.Client, error) {
	server, token := f.serverURL(), f.token
	if token == "" {
		token = os.Getenv(envToken)
	}
	c, err := client.New(server, token)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return c, nil
}

// serverURL is --server, else $XEMA_SERVER, else the default.
func (f *adminFlags) serverURL() string {
	return cmp.Or(f.server, os.Getenv(envServer), defaultServer)
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
