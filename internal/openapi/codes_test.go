package openapi

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// moduleCodes are the exported Code constants of the module's packages (tests aside) by
// package and name ("runner.CodeNoToken"), with their values. A constant that names another
// package's (runner.CodeRedirect = egress.CodeRedirect) takes its value.
func moduleCodes(t *testing.T, root string) map[string]string {
	t.Helper()
	values, aliases := map[string]string{}, map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !n.IsExported() || !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					name := f.Name.Name + "." + n.Name
					switch v := vs.Values[i].(type) {
					case *ast.BasicLit:
						if v.Kind == token.STRING {
							values[name], _ = strconv.Unquote(v.Value)
						}
					case *ast.SelectorExpr:
						if pkg, ok := v.X.(*ast.Ident); ok {
							aliases[name] = pkg.Name + "." + v.Sel.Name
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, of := range aliases {
		v, ok := values[of]
		if !ok {
			t.Fatalf("%s names %s, which is no Code string constant", name, of)
		}
		values[name] = v
	}
	return values
}

// TestEveryCodeListed: every exported Code string constant of the module is in Codes and in
// the Error schema of schemas/openapi.json, and each code listed there is one of them.
func TestEveryCodeListed(t *testing.T) {
	codes := moduleCodes(t, filepath.Join("..", ".."))
	if len(codes) < 100 {
		t.Fatalf("found %d Code constants; the walk missed the module's packages", len(codes))
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "schemas", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code struct {
							Codes []string `json:"x-codes"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	documented := doc.Components.Schemas.Error.Properties.Code.Codes
	if !slices.IsSorted(documented) || !slices.IsSorted(Codes) {
		t.Errorf("the codes are not sorted")
	}
	declared := map[string]bool{}
	for name, v := range codes {
		declared[v] = true
		for where, list := range map[string][]string{"Codes": Codes, "schemas/openapi.json": documented} {
			if !slices.Contains(list, v) {
				t.Errorf("%s = %q is missing from %s", name, v, where)
			}
		}
	}
	for _, v := range documented {
		if !declared[v] {
			t.Errorf("schemas/openapi.json lists %q, which no Code constant declares", v)
		}
	}
}
