package e2e

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const customRule = `package xema.custom

deny contains {"code": "NO_FRIDAY_DEPLOYS", "detail": "no deploys on friday"} if {
	input.ref == "deploy:run@1"
	input.day == "friday"
}

deny contains {"code": "NEVER_TESTED", "detail": "never"} if {
	input.ref == "never:here@1"
}
`

const customTests = `package xema.custom_test

import data.xema.custom

test_friday if {
	print("checking friday")
	count(custom.deny) == 1 with input as {"ref": "deploy:run@1", "day": "friday"}
}
`

// runXema runs the CLI and answers its stdout, stderr and exit status.
func runXema(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, xemaBinary(t), args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPolicyTest: xema policy test refuses what xema serve refuses, runs only the given
// directories unless --with-builtin, keeps print() output, and reports as text, JSON and JUnit
// with a coverage threshold.
func TestPolicyTest(t *testing.T) {
	dir := writeFiles(t, map[string]string{"rules.rego": customRule, "rules_test.rego": customTests})

	t.Run("a package outside xema.custom is refused", func(t *testing.T) {
		bad := writeFiles(t, map[string]string{"mine.rego": "package xema.mine\n\ndeny contains \"x\" if true\n"})
		_, stderr, code := runXema(t, "policy", "test", bad)
		if code != 2 || !strings.Contains(stderr, "package data.xema.mine must be data.xema.custom") {
			t.Fatalf("exit %d, stderr %s", code, stderr)
		}
	})
	t.Run("only the given directories", func(t *testing.T) {
		stdout, stderr, code := runXema(t, "policy", "test", dir, "--format", "json")
		var results []struct {
			Package string `json:"package"`
			Name    string `json:"name"`
			Output  []byte `json:"output"`
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &results) != nil || len(results) != 1 {
			t.Fatalf("exit %d: %s %s", code, stdout, stderr)
		}
		if results[0].Package != "data.xema.custom_test" || string(results[0].Output) != "checking friday\n" {
			t.Fatalf("results %+v", results)
		}
		all, _, code := runXema(t, "policy", "test", dir, "--with-builtin", "--format", "json")
		if code != 0 || json.Unmarshal([]byte(all), &results) != nil || len(results) < 40 {
			t.Fatalf("--with-builtin: exit %d, %d results", code, len(results))
		}
	})
	t.Run("print output is kept for a failure", func(t *testing.T) {
		failing := writeFiles(t, map[string]string{"rules.rego": customRule,
			"f_test.rego": "package xema.custom_test\n\nimport data.xema.custom\n\ntest_monday if {\n\tprint(\"looked at monday\")\n\tcount(custom.deny) == 1 with input as {\"ref\": \"deploy:run@1\", \"day\": \"monday\"}\n}\n"})
		stdout, _, code := runXema(t, "policy", "test", failing)
		if code != 1 || !strings.Contains(stdout, "test_monday: FAIL") || !strings.Contains(stdout, "looked at monday") {
			t.Fatalf("exit %d:\n%s", code, stdout)
		}
		stdout, _, code = runXema(t, "policy", "test", failing, "--format", "junit")
		var doc struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Suites   []struct {
				Cases []struct {
					Name      string    `xml:"name,attr"`
					Failure   *struct{} `xml:"failure"`
					SystemOut string    `xml:"system-out"`
				} `xml:"testcase"`
			} `xml:"testsuite"`
		}
		if code != 1 || xml.Unmarshal([]byte(stdout), &doc) != nil || doc.Tests != 1 || doc.Failures != 1 ||
			doc.Suites[0].Cases[0].Failure == nil || doc.Suites[0].Cases[0].SystemOut != "looked at monday\n" {
			t.Fatalf("junit: exit %d\n%s", code, stdout)
		}
	})
	t.Run("threshold", func(t *testing.T) {
		stdout, stderr, code := runXema(t, "policy", "test", dir, "--threshold", "99")
		if code != 1 || !strings.Contains(stderr, "below --threshold 99.00%") || !strings.Contains(stdout, "rules.rego") {
			t.Fatalf("exit %d: %s %s", code, stdout, stderr)
		}
		stdout, _, code = runXema(t, "policy", "test", dir, "--threshold", "50", "--format", "json")
		var cov struct {
			Coverage float64 `json:"coverage"`
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &cov) != nil || cov.Coverage < 50 || cov.Coverage >= 99 {
			t.Fatalf("exit %d: %s", code, stdout)
		}
		_, _, code = runXema(t, "policy", "test", dir, "--threshold", "99", "--format", "json")
		if code != 1 {
			t.Fatalf("json below threshold: exit %d", code)
		}
	})
}
