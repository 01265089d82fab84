// Package arch checks the module's shape against ARCHITECTURE.md: the layers, the imports
// between them, and the README's layout table.
package arch

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/xemahq/xema/"

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	layerRow = regexp.MustCompile(`^\| ([0-9]+)\. [^|]+\| (.+) \|$`)
	climbRow = regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]+)` \\|")
	pkgName  = regexp.MustCompile("`([^`]+)`")
)

// layers reads ARCHITECTURE.md's layer table (package → layer) and its known climbs.
func layers(t *testing.T, root string) (map[string]int, map[[2]string]bool) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layer := map[string]int{}
	climbs := map[[2]string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := layerRow.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			for _, p := range pkgName.FindAllStringSubmatch(m[2], -1) {
				if _, twice := layer[p[1]]; twice {
					t.Errorf("ARCHITECTURE.md puts %s in two layers", p[1])
				}
				layer[p[1]] = n
			}
		} else if m := climbRow.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[2], "internal/") {
			climbs[[2]string{m[1], m[2]}] = true
		}
	}
	if len(layer) == 0 {
		t.Fatal("ARCHITECTURE.md has no layer table")
	}
	return layer, climbs
}

// imports lists each package of the module with the module's packages it imports (not its
// tests').
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		p := strings.TrimPrefix(fields[0], module)
		pkgs[p] = nil
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				pkgs[p] = append(pkgs[p], strings.TrimPrefix(imp, module))
			}
		}
	}
	return pkgs
}

// TestLayering: every package is in one layer of ARCHITECTURE.md, imports only packages of
// its layer or the ones above it, save the climbs the page names (each of which still exists).
func TestLayering(t *testing.T) {
	root := repoRoot(t)
	layer, climbs := layers(t, root)
	pkgs := imports(t, root)
	for p := range layer {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("ARCHITECTURE.md names %s, which is no package of the module", p)
		}
	}
	seen := map[[2]string]bool{}
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range pkgs {
			if !yield(p) {
				return
			}
		}
	}) {
		lp, ok := layer[p]
		if !ok {
			t.Errorf("%s is in no layer of ARCHITECTURE.md: add it where it belongs", p)
			continue
		}
		for _, imp := range pkgs[p] {
			li, ok := layer[imp]
			if !ok || li <= lp {
				continue
			}
			if climbs[[2]string{p, imp}] {
				seen[[2]string{p, imp}] = true
				continue
			}
			t.Errorf("%s (layer %d) imports %s (layer %d): an import back up the layers", p, lp, imp, li)
		}
	}
	for c := range climbs {
		if !seen[c] {
			t.Errorf("ARCHITECTURE.md lists %s → %s as a known climb, which no longer exists: drop the row", c[0], c[1])
		}
	}
}

// TestReadmeLayoutListsEveryPackage: the README's layout table names every package.
func TestReadmeLayoutListsEveryPackage(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "## Layout")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	for p := range imports(t, root) {
		if !strings.Contains(layout, "`"+p+"`") && !strings.Contains(layout, "`"+p+"/`") {
			t.Errorf("README.md's layout table does not name %s", p)
		}
	}
}
