// Package policies holds the Rego that decides every capability call (package xema.authz)
// and its tests. The serving bundle takes the modules from Modules; tests stay out of it.
package policies

import (
	"embed"
	"io/fs"
	"strings"
)

// files holds every .rego file, tests included, so `xema policy test` can run them.
//
//go:embed *.rego
var files embed.FS

// FS returns all embedded Rego files, tests included.
func FS() fs.FS { return files }

// IsTest reports whether a Rego file name is a test module, kept out of the bundle.
func IsTest(name string) bool { return strings.HasSuffix(name, "_test.rego") }
