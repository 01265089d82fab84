package policy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const fridayRule = "package xema.custom\n\ndeny contains {\"code\": \"NO_FRIDAY_DEPLOYS\", \"detail\": \"no\"} if input.ref == \"deploy:run@1\"\n"

func TestReasonCodesFromRegoAndDocs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "friday.rego"), []byte(fridayRule), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := New(context.Background(), Options{ExtraDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"NO_FRIDAY_DEPLOYS", "MISSING_GRANT", "GRANT_ORG_MISMATCH", "OWN_APPROVAL", "CUSTOM_DENY"} {
		if !e.KnownReasonCode(c) {
			t.Errorf("%s not known; codes %v", c, e.ReasonCodes())
		}
	}
	if e.KnownReasonCode("NOPE") || e.KnownReasonCode("input") {
		t.Errorf("unknown codes known: %v", e.ReasonCodes())
	}
	// docs/policy-data.md names exactly DocumentedReasonCodes.
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "policy-data.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), "Reason codes:")
	para := string(doc)[i : i+strings.Index(string(doc)[i:], "\n\n")]
	named := regexp.MustCompile(`\b[A-Z][A-Z_]{3,}\b`).FindAllString(para, -1)
	for _, c := range named {
		if !slices.Contains(DocumentedReasonCodes, c) {
			t.Errorf("docs/policy-data.md names %s, not in DocumentedReasonCodes", c)
		}
	}
	for _, c := range DocumentedReasonCodes {
		if !slices.Contains(named, c) {
			t.Errorf("DocumentedReasonCodes has %s, docs/policy-data.md does not name it", c)
		}
	}
}

// TestReloadExtra: a changed --policy-dir file is recompiled over the loaded data; a broken
// one keeps the serving policy and is reported once.
func TestReloadExtra(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "friday.rego")
	if err := os.WriteFile(file, []byte(fridayRule), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := New(ctx, Options{ExtraDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(ctx, map[string]any{}, "r1"); err != nil {
		t.Fatal(err)
	}
	if changed, err := e.ReloadExtra(ctx); changed || err != nil {
		t.Fatalf("unchanged dir: changed %v err %v", changed, err)
	}
	_, etag1 := e.Bundle()
	rev1 := e.Revision()
	if !strings.HasPrefix(rev1, "r1+p") || e.PolicyDir() != dir || !slices.Equal(e.PlatformFiles(), []string{filepath.Base(file)}) {
		t.Fatalf("with platform Rego: revision %q (want r1+p<hash>), dir %q, files %v", rev1, e.PolicyDir(), e.PlatformFiles())
	}
	touch := func(src string, at time.Time) {
		t.Helper()
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, at, at); err != nil {
			t.Fatal(err)
		}
	}
	touch(strings.ReplaceAll(fridayRule, "NO_FRIDAY_DEPLOYS", "NO_WEEKEND_DEPLOYS"), time.Now().Add(time.Minute))
	if changed, err := e.ReloadExtra(ctx); !changed || err != nil {
		t.Fatalf("changed file: changed %v err %v", changed, err)
	}
	tar, etag2 := e.Bundle()
	rev2 := e.Revision()
	if etag2 == etag1 || !e.KnownReasonCode("NO_WEEKEND_DEPLOYS") || e.KnownReasonCode("NO_FRIDAY_DEPLOYS") || e.Revision() == rev1 || !strings.HasPrefix(e.Revision(), "r1+p") || len(tar) == 0 {
		t.Fatalf("after reload: etag %s->%s codes %v revision %s", etag1, etag2, e.ReasonCodes(), e.Revision())
	}
	touch("package xema.custom\n\ndeny contains {", time.Now().Add(2*time.Minute))
	if changed, err := e.ReloadExtra(ctx); changed || err == nil {
		t.Fatalf("broken file: changed %v err %v", changed, err)
	}
	if _, etag := e.Bundle(); etag != etag2 || !e.KnownReasonCode("NO_WEEKEND_DEPLOYS") || e.Revision() != rev2 {
		t.Fatal("a broken file replaced the serving policy")
	}
	if changed, err := e.ReloadExtra(ctx); changed || err != nil {
		t.Fatalf("the same broken state again: changed %v err %v", changed, err)
	}
	touch("package xema.mine\n\ndeny contains \"x\" if true\n", time.Now().Add(3*time.Minute))
	if _, err := e.ReloadExtra(ctx); err == nil || !strings.Contains(err.Error(), "must be data.xema.custom") {
		t.Fatalf("package outside xema.custom: %v", err)
	}
	// Loading new data keeps the last good platform policy.
	if err := e.Load(ctx, map[string]any{}, "r2"); err != nil || !e.KnownReasonCode("NO_WEEKEND_DEPLOYS") {
		t.Fatalf("load after a broken reload: %v", err)
	}
}
