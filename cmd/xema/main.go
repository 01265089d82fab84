// Command xema is the capability gateway and its Shell: `xema serve` runs the gateway, the
// other sub-commands author biomes and policies and talk to a running gateway.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// rootCmd collects the sub-commands; each lives in its own file and adds itself in init.
var rootCmd = &cobra.Command{
	Use:           "xema",
	Short:         "Xema capability gateway",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "xema:", err)
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
