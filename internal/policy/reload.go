package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/xemahq/xema/internal/periodic"
)

// signature fingerprints the extra dir's Rego files (path, size, mtime), to notice a change
// without reading them; "" without an extra dir.
func (e *Engine) signature() (string, error) {
	if e.extraDir == "" {
		return "", nil
	}
	h := sha256.New()
	err := filepath.WalkDir(e.extraDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".rego") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", p, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("platform policy dir %s: %w", e.extraDir, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ReloadExtra re-reads the platform policy dir (--policy-dir) when a Rego file in it was
// added, removed or changed (size or mtime), and recompiles the serving bundle over the last
// loaded data. changed is true when the new policy now serves. A file that does not parse, a
// package outside xema.custom or a bundle that does not compile keeps the serving policy and
// is answered as the error; the same broken state is not retried until a file changes again.
func (e *Engine) ReloadExtra(ctx context.Context) (changed bool, err error) {
	if e.extraDir == "" {
		return false, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	sig, err := e.signature()
	if err != nil || sig == e.extraSig {
		return false, err
	}
	e.extraSig = sig // a broken state is reported once per change
	mods, err := e.readAll()
	if err != nil {
		return false, err
	}
	if e.loaded {
		if err := e.compile(ctx, mods, e.dataJSON, e.dataRev); err != nil {
			return false, err
		}
	}
	e.modules = mods
	e.setCodes(mods)
	return true, nil
}

// WatchExtra polls the platform policy dir every `every` until ctx ends, reloading it on
// change (ReloadExtra) and logging the outcome; a broken file is logged and the serving
// policy stays.
func (e *Engine) WatchExtra(ctx context.Context, every time.Duration) {
	if e.extraDir == "" || every <= 0 {
		return
	}
	periodic.Every(ctx, every, func(time.Time) {
		changed, err := e.ReloadExtra(ctx)
		switch {
		case err != nil:
			reloads.WithLabelValues("failed").Inc()
			slog.Error("platform policy not reloaded; the previous policy keeps serving", "dir", e.extraDir, "revision", e.Revision(), "err", err)
		case changed:
			reloads.WithLabelValues("ok").Inc()
			slog.Info("platform policy reloaded", "dir", e.extraDir, "files", e.PlatformFiles(), "revision", e.Revision())
		}
	})
}

// reloads counts the platform policy dir's reloads by result (ok, failed).
var reloads = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "xema_policy_reloads_total", Help: "Reloads of the platform policy dir (--policy-dir) by result: ok, or failed (the previous policy keeps serving).",
}, []string{"result"})

// platformPrefix names the modules of the platform policy dir (readAll).
const platformPrefix = "custom/"

// servingRevision is the revision of a bundle of mods over data of revision dataRev: the data's
// revision, plus a hash of the platform Rego's paths and sources when there is any, so a
// changed platform policy serves (and audits) under a revision of its own.
func servingRevision(dataRev string, mods []module) string {
	h := sha256.New()
	n := 0
	for _, m := range mods {
		if strings.HasPrefix(m.path, platformPrefix) {
			fmt.Fprintf(h, "%d:%s%d:%s", len(m.path), m.path, len(m.source), m.source)
			n++
		}
	}
	if n == 0 {
		return dataRev
	}
	return dataRev + "+p" + hex.EncodeToString(h.Sum(nil))[:12]
}

// PlatformFiles lists the platform policy dir's Rego files the serving policy holds, relative
// to the dir.
func (e *Engine) PlatformFiles() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var files []string
	for _, m := range e.modules {
		if p, ok := strings.CutPrefix(m.path, platformPrefix); ok {
			files = append(files, p)
		}
	}
	return files
}

// PolicyDir is the platform policy dir (--policy-dir), "" without one.
func (e *Engine) PolicyDir() string { return e.extraDir }

// DocumentedReasonCodes are the reason codes docs/policy-data.md names.
var DocumentedReasonCodes = []string{
	"MISSING_GRANT", "RESOURCE_NOT_REACHABLE", "ENVIRONMENT_NOT_ALLOWED", "SUBJECT_NOT_COVERED",
	"AUDIENCE_INCOMPATIBLE", "RATE_LIMITED", "QUOTA_EXCEEDED", "HUMAN_BASELINE_NOT_MET",
	"NOT_SAFE_FOR_AGENTS", "CALLER_CONSTRAINT", "MISSING_BINDING", "INSTANCE_GRADE_NOT_MET",
	"CAPABILITY_RETIRED", "NOT_PUBLISHED", "NOT_ARMED", "UNKNOWN_CAPABILITY", "INVALID_INPUT",
	"OWN_APPROVAL", "APPROVER_NOT_HUMAN", "NOT_DELEGABLE", "ACTOR_NOT_ALLOWED", "PERSON_NOT_ALLOWED",
	"CONNECTION_REQUIRED", "CONNECTION_EXPIRED", "CUSTOM_DENY",
}

// setCodes collects the string literals of "code" in the heads of the deny rules of mods.
func (e *Engine) setCodes(mods []module) {
	codes := map[string]bool{}
	for _, c := range DocumentedReasonCodes {
		codes[c] = true
	}
	for _, m := range mods {
		for _, r := range m.parsed.Rules {
			for rule := r; rule != nil; rule = rule.Else {
				ref := rule.Head.Ref()
				if len(ref) == 0 {
					continue
				}
				if last := ref[len(ref)-1].Value; ast.Compare(last, ast.String("deny")) != 0 && ast.Compare(last, ast.Var("deny")) != 0 {
					continue
				}
				ast.WalkTerms(rule.Head, func(t *ast.Term) bool {
					if obj, ok := t.Value.(ast.Object); ok {
						if v := obj.Get(ast.StringTerm("code")); v != nil {
							if s, ok := v.Value.(ast.String); ok {
								codes[string(s)] = true
							}
						}
					}
					return false
				})
			}
		}
	}
	e.codes.Store(&codes)
}

// ReasonCodes are the reason codes a denial can carry: those docs/policy-data.md names and
// every string literal of "code" in a deny rule of the serving modules (platform Rego
// included), sorted.
func (e *Engine) ReasonCodes() []string {
	p := e.codes.Load()
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(*p))
	for c := range *p {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// KnownReasonCode reports whether code is one of ReasonCodes.
func (e *Engine) KnownReasonCode(code string) bool {
	p := e.codes.Load()
	return p != nil && (*p)[code]
}
