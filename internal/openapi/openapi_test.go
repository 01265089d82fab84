package openapi

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite schemas/openapi.json")

// TestDocumentUpToDate: schemas/openapi.json is what Build generates from the code.
func TestDocumentUpToDate(t *testing.T) {
	got, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "schemas", "openapi.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("schemas/openapi.json is stale: go test ./internal/openapi -run TestDocumentUpToDate -update")
	}
}
