#!/bin/sh
# Builds the ory/hydra binary the identity tests run against (the real OAuth2/OIDC provider),
# from the Go module proxy through this tools module, into a cache directory. DSN=memory is
# SQLite in memory, which hydra only compiles in with the sqlite tags (cgo).
#
# Usage: tools/hydra/build.sh [cache-dir]
# Prints the binary's path on success. Idempotent: a finished build is reused.
set -eu

version="v2.3.0"
cache="${1:-${XEMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xema}/hydra}"
bin="$cache/hydra-$version-sqlite"

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
cd "$(dirname "$0")"
go build -tags sqlite,sqlite_omit_load_extension -o "$bin.tmp" github.com/ory/hydra/v2
mv "$bin.tmp" "$bin"
echo "$bin"
