package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/schemas"
)

// biomeIDPattern is the id of a biome (schemas/biome.schema.json).
var biomeIDPattern = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// newBiomeInitCmd is `xema biome init`.
func newBiomeInitCmd() *cobra.Command {
	var id, url string
	cmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a minimal valid biome (one read-only http capability) to DIR",
		Long: `Write biome.json and contributions/hello.capability.contribution.json to DIR (created;
it must not hold a biome.json yet). The biome passes 'xema biome lint' as written; change the
ref, the schemas and the provider URL, then lint and submit it (docs/authoring.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if id == "" {
				id = filepath.Base(filepath.Clean(dir))
			}
			if !biomeIDPattern.MatchString(id) {
				return &exitError{code: 2, err: fmt.Errorf("biome id %q: want a lower-case slug such as my-biome (--id)", id)}
			}
			if _, err := os.Stat(filepath.Join(dir, "biome.json")); err == nil {
				return &exitError{code: 2, err: fmt.Errorf("%s already holds a biome.json", dir)}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return &exitError{code: 2, err: err}
			}
			if err := os.MkdirAll(filepath.Join(dir, "contributions"), 0o755); err != nil {
				return &exitError{code: 2, err: err}
			}
			files := map[string]string{
				"biome.json": fmt.Sprintf(initBiome, id, id, id),
				filepath.Join("contributions", "hello.capability.contribution.json"): fmt.Sprintf(initContribution, id, url),
			}
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					return &exitError{code: 2, err: err}
				}
			}
			if err := runLint(cmd.OutOrStdout(), dir, "text"); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "next: edit %s, then xema biome lint %s and xema biome submit %s\n", dir, dir, dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "biome id (default: DIR's base name)")
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:9000/hello", "the provider URL the capability is invoked at")
	return cmd
}

const initBiome = `{
  "$schema": "` + schemas.BiomeID + `",
  "id": %q,
  "version": "0.1.0",
  "requiresCapabilities": ["%s:hello@1"],
  "permissionHints": [
    {"capability": "%s:hello@1", "reason": "Greets someone by name; reads nothing, changes nothing."}
  ],
  "defaultProfile": "read-only-assistant"
}
`

const initContribution = `{
  "$schema": "` + schemas.ContributionID + `",
  "kind": "capability",
  "manifest": {
    "ref": "%s:hello@1",
    "title": "Say hello",
    "summary": "Answers a greeting for a name.",
    "sideEffects": "None: read only.",
    "riskTier": "low",
    "requiresApproval": false,
    "effectClass": "read",
    "reach": "integration",
    "outputClassification": "public",
    "authorityEffect": "none",
    "safeForAgents": true,
    "inputSchema": {
      "type": "object",
      "required": ["name"],
      "additionalProperties": false,
      "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 100}}
    },
    "outputSchema": {
      "type": "object",
      "required": ["greeting"],
      "properties": {"greeting": {"type": "string"}}
    },
    "examples": [{"input": {"name": "Ada"}, "output": {"greeting": "Hello, Ada"}}]
  },
  "invocation": {"kind": "http", "url": %q, "timeoutMs": 5000}
}
`
