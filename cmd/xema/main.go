// Command xema is the capability gateway and its Shell: `xema serve` runs the gateway, the
// other sub-commands author biomes and policies and talk to a running gateway.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	cobra.AddTemplateFunc("flagUsages", flagUsages)
	root.SetUsageTemplate(strings.ReplaceAll(root.UsageTemplate(), "Flags.FlagUsages", "Flags | flagUsages"))
	root.SetOut(&terminalWriter{w: os.Stdout})
	root.SetErr(&terminalWriter{w: os.Stderr})
	root.AddCommand(newServeCmd(), newDevCmd(), newBiomeCmd(), newGrantCmd(), newPolicyCmd(), newBundleCmd(),
		newMigrateCmd(), newApprovalsCmd(), newAuditCmd(), newWhyDeniedCmd(), newBindingCmd(), newCredentialCmd(),
		newMCPServerCmd(), newConnectionCmd(), newReplayCmd(), newVersionCmd(), newKeysCmd(), newBackupCmd(), newRestoreCmd())
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

// flagUsages is pflag's FlagUsages without the "[=true|false]" pflag 1.1 writes after every
// boolean flag (`-h, --help[=true|false]`): a boolean flag is given bare, as everywhere else.
// Each boolean's value is wrapped in a type without IsBoolFlag, which pflag prints plainly.
func flagUsages(fs *pflag.FlagSet) string {
	plain := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.VisitAll(func(f *pflag.Flag) {
		c := *f
		if f.Value.Type() == "bool" {
			c.Value = plainBool{f.Value}
		}
		plain.AddFlag(&c)
	})
	return plain.FlagUsages()
}

// plainBool is a boolean flag's value without its IsBoolFlag method.
type plainBool struct{ pflag.Value }
