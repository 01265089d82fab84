package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/open-policy-agent/opa/v1/bundle"
)

// writeBundle writes an OPA bundle (gzipped tar: data.json, the Rego, .manifest) with OPA's
// own bundle writer, whose entries carry no timestamps, so the same content always has the
// same ETag. The root "xema" covers data.xema and every policy package, so a stock OPA owns
// exactly that subtree.
func writeBundle(revision string, dataJSON []byte, mods []module) ([]byte, string, error) {
	var data map[string]any
	if err := json.Unmarshal(dataJSON, &data); err != nil {
		return nil, "", fmt.Errorf("bundle data: %w", err)
	}
	roots, regoVersion := []string{"xema"}, 1
	b := bundle.Bundle{
		Manifest: bundle.Manifest{Revision: revision, Roots: &roots, RegoVersion: &regoVersion},
		Data:     data,
	}
	for _, m := range mods {
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: m.path, Path: m.path, Raw: []byte(m.source), Parsed: m.parsed})
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		return nil, "", fmt.Errorf("write bundle: %w", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), `"` + hex.EncodeToString(sum[:16]) + `"`, nil
}
