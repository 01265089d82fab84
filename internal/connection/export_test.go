package connection

import "github.com/xemahq/xema/internal/store"

// TokenAAD lets tests open the tokens a connection holds.
func TokenAAD(kind string, c store.Connection) []byte { return tokenAAD(kind, c) }

// Refused exposes how a failed token request is judged.
var Refused = refused
