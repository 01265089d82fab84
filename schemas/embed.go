// Package schemas holds the JSON Schemas (draft 2020-12) of every manifest Xema reads. They
// are the single source of truth for authors, `xema biome lint` and the ingestion API.
package schemas

import "embed"

// FS holds every *.schema.json file of this directory.
//
//go:embed *.schema.json
var FS embed.FS

// Canonical ids ($id) of the schemas in FS, keyed by file name.
const (
	ContributionID = "https://xema.dev/schemas/contribution.schema.json"
	BiomeID        = "https://xema.dev/schemas/biome.schema.json"
)

// IDs maps each file in FS to its $id.
var IDs = map[string]string{
	"contribution.schema.json": ContributionID,
	"biome.schema.json":        BiomeID,
}
