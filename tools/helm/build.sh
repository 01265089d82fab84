#!/bin/sh
# Builds helm (the chart checks of deploy/helm run `helm lint` and `helm template` with it)
# from the Go module proxy at a pinned version, into a cache directory, stamped with its
# version as helm's own Makefile does.
#
# Usage: tools/helm/build.sh [cache-dir]
# Prints the binary's path on success. Idempotent: a finished build is reused.
set -eu

version="v3.22.0"
cache="${1:-${XEMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xema}/helm}"
bin="$cache/helm-$version"

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" CGO_ENABLED=0 go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$version" "helm.sh/helm/v3/cmd/helm@$version"
mv "$tmp/helm" "$bin"
echo "$bin"
