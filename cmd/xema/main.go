// Command xema is the capability gateway and its Shell: `xema serve` runs the gateway, the
// other sub-commands author biomes and policies and talk to a running gateway.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/buildinfo"
)

// newRootCmd is `xema` with every sub-command; each is built by the newXCmd of its own file.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "xema",
		Short:         "Xema capability gateway",
		SilenceUsage:  true,
		SilenceErrors: true,
		// xema --version prints what xema version prints.
		Version: buildinfo.Read().Short(),
	}
	root.SetVersionTemplate(buildinfo.Read().String() + "\n")
	root.SetOut(&terminalWriter{w: os.Stdout})
	root.SetErr(&terminalWriter{w: os.Stderr})
	root.AddCommand(newServeCmd(), newDevCmd(), newBiomeCmd(), newGrantCmd(), newPolicyCmd(), newBundleCmd(),
		newMigrateCmd(), newApprovalsCmd(), newAuditCmd(), newWhyDeniedCmd(), newBindingCmd(), newCredentialCmd(),
		newMCPServerCmd(), newReplayCmd(), newVersionCmd(), newKeysCmd(), newBackupCmd(), newRestoreCmd())
	return root
}

func main() {
	root := newRootCmd()
	if err := root.Execute(); err != nil {
		fmt.Fprintln(root.ErrOrStderr(), "xema:", err)
		os.Exit(exitCode(err))
	}
}

// exitError carries a specific exit status (e.g. lint findings exit 1, usage errors 2).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if ee, ok := err.(*exitError); ok {
		return ee.code
	}
	return 1
}
