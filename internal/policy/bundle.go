package policy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// manifest is OPA's bundle .manifest: the root "xema" covers data.xema and every policy
// package, so a stock OPA owns exactly that subtree.
type manifest struct {
	Revision    string   `json:"revision"`
	Roots       []string `json:"roots"`
	RegoVersion int      `json:"rego_version"`
}

// writeBundle writes an OPA bundle (gzipped tar: .manifest, data.json, the Rego) with a
// fixed file order and no timestamps, so the same content always has the same ETag.
func writeBundle(revision string, dataJSON []byte, mods []module) ([]byte, string, error) {
	man, err := json.Marshal(manifest{Revision: revision, Roots: []string{"xema"}, RegoVersion: 1})
	if err != nil {
		return nil, "", fmt.Errorf("encode manifest: %w", err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if _, err := tw.Write(body); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		return nil
	}
	if err := add(".manifest", man); err != nil {
		return nil, "", err
	}
	if err := add("data.json", dataJSON); err != nil {
		return nil, "", err
	}
	for _, m := range mods {
		if err := add(m.path, []byte(m.source)); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("close tar: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, "", fmt.Errorf("close gzip: %w", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), `"` + hex.EncodeToString(sum[:16]) + `"`, nil
}
