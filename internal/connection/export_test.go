package connection

import "github.com/xemahq/xema/internal/store"

// TokenAAD lets tests open the tokens a connection holds.
func TokenAAD(kind string, c store.Connection) []byte { return tokenAAD(kind, c) }

// Refused exposes how a failed token request is judged.
var Refused = refused

// ClientSecretAAD lets tests seal a server's client secret as discovery does.
func ClientSecretAAD(resource string) []byte { return clientSecretAAD(resource) }

// ClientSecret opens a server's client secret.
var ClientSecret = clientSecret
