package chartcheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every PostgreSQL migration says in docs/operations.md ("Upgrades") whether the previous
// release's replicas can run on it during a rolling upgrade: the chart rolls by default, so
// an undocumented migration would be rolled whatever it breaks.
func TestUpgradeDocsNameEveryMigration(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "migrations", "postgres", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no PostgreSQL migrations found (%v)", err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, upgrades, ok := strings.Cut(string(doc), "### Upgrades")
	if !ok {
		t.Fatal(`docs/operations.md has no "### Upgrades" section`)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d{4}_\w+) \| (.+) \|$`).FindAllStringSubmatch(upgrades, -1) {
		rows[m[1]] = m[2]
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		row, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("migration %s has no row in docs/operations.md's upgrade table: say whether the previous release's replicas run on it", name)
		case !strings.HasPrefix(row, "compatible") && !strings.HasPrefix(row, "**needs a stop**") && !strings.HasPrefix(row, "—"):
			t.Errorf("migration %s: row %q says neither compatible nor **needs a stop**", name, row)
		}
	}
}
