// Package migrations holds the schema of the store as numbered SQL files, one directory per
// engine (sqlite/, postgres/). Files are applied in name order, each once, each in its own
// transaction together with its row in schema_migrations.
package migrations

import "embed"

// FS holds sqlite/NNNN_name.sql and postgres/NNNN_name.sql.
//
//go:embed sqlite/*.sql postgres/*.sql
var FS embed.FS
