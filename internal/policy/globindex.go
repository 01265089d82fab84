package policy

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
)

// OPA v1.22.3's rule index (v1/ast/index.go) mis-handles glob.match. An expression
// `glob.match("<pattern>", [<delimiters>], x)` in a rule body makes the index try the rule
// only for values of x whose segments equal the pattern's, but it compares the segments
// with their backslashes kept: a rule of the pattern `team\*` is never tried for "team*",
// which the pattern matches, and one of `a/*/c` never for `a/x\/c` (the input's backslash
// hides its delimiter from the index, not from glob.match). Such a rule silently does not
// fire where the same expression as a query holds (docs/security.md has the report).
//
// The gateway keeps every such expression out of the index: it is rewritten to
// `glob.match(...) == true`, which decides alike and which the index does not take (the
// call's result is captured). The rewrite applies to every module of a bundle before it
// is compiled or served, so a stock OPA loading the served bundle decides alike, and to
// the residuals of partial evaluation (which inline a grant's resource globs as constants).
// TestGlobIndexBugUpstream fails once an OPA upgrade fixes the index: drop this then.

// keepGlobsOutOfIndex rewrites the glob.match expressions of m that OPA's index would
// take, in place; it reports whether it changed any.
func keepGlobsOutOfIndex(m *ast.Module) bool {
	changed := false
	ast.WalkExprs(m, func(x *ast.Expr) bool {
		if indexedGlob(x) {
			call := ast.CallTerm(x.Terms.([]*ast.Term)...)
			call.Location = x.Location
			x.Terms = ast.Equal.Expr(call, ast.BooleanTerm(true).SetLocation(x.Location)).Terms
			changed = true
		}
		return false
	})
	return changed
}

// indexedGlob reports whether x is an expression the index reads as a glob: glob.match of
// a string constant with an array of delimiters, its result not captured, not negated and
// without `with` (ast/index.go: updateGlobMatch).
func indexedGlob(x *ast.Expr) bool {
	if x.Negated || len(x.With) > 0 || !x.IsCall() || !x.Operator().Equal(ast.GlobMatch.Ref()) {
		return false
	}
	ops := x.Operands()
	if len(ops) != 3 {
		return false
	}
	_, pattern := ops[0].Value.(ast.String)
	_, delimiters := ops[1].Value.(*ast.Array)
	return pattern && delimiters
}

// withGlobsOutOfIndex is m with keepGlobsOutOfIndex applied: the same module when nothing
// changed, else one whose source is the rewritten module formatted (what the bundle
// carries, so that a stock OPA reads the rewrite too).
func withGlobsOutOfIndex(m module) (module, error) {
	if !keepGlobsOutOfIndex(m.parsed) {
		return m, nil
	}
	src, err := format.AstWithOpts(m.parsed, format.Opts{RegoVersion: ast.RegoV1})
	if err != nil {
		return module{}, fmt.Errorf("format %s: %w", m.path, err)
	}
	// Parsed again from the text served, so the module compiled is the one a stock OPA reads;
	// under the file name of the first parse, which errors name.
	parsed, err := ast.ParseModuleWithOpts(m.parsed.Package.Location.File, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return module{}, fmt.Errorf("parse %s after keeping its globs out of the index: %w", m.path, err)
	}
	return module{path: m.path, source: string(src), parsed: parsed}, nil
}
