#!/bin/sh
# Builds the Gitea binary the connector tests run against, from the Go module
# proxy's source, into a cache directory. Gitea's go.mod has replace
# directives, so it must be built inside (a writable copy of) its own module
# directory rather than with `go install`.
#
# Usage: tools/gitea/build.sh [cache-dir]
# Prints the binary's path on success. Idempotent: a finished build is reused.
set -eu

version="${GITEA_VERSION:-v1.26.0}"
cache="${1:-${XEMA_CACHE_DIR:-$HOME/.cache/xema}/gitea}"
bin="$cache/gitea-$version"
src="$cache/src-$version"

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"

dir=$(go mod download -json "code.gitea.io/gitea@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ]; then
	echo "gitea: go mod download gave no Dir for $version" >&2
	exit 1
fi

# The module cache is read-only; build in a copy (which also serves as
# STATIC_ROOT_PATH for templates and options at run time).
if [ ! -f "$src/go.mod" ]; then
	rm -rf "$src.tmp"
	cp -r "$dir" "$src.tmp"
	chmod -R u+w "$src.tmp"
	mv "$src.tmp" "$src"
fi

cd "$src"
CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" \
	-ldflags "-s -w -X code.gitea.io/gitea/modules/setting.AppVer=${version#v}" .
mv "$bin.tmp" "$bin"
echo "$bin"
