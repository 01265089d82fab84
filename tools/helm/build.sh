#!/bin/sh
# Builds helm (the chart checks of deploy/helm run `helm lint` and `helm template` with it)
# from the Go module proxy at a pinned version, into a cache directory, stamped as helm's own
# Makefile does: its version, and the Kubernetes version of its client-go (v0.37 → 1.37), which
# `helm template` and `helm lint` assume without a cluster (unstamped, helm assumes 1.20).
#
# Usage: tools/helm/build.sh [cache-dir]
# Prints the binary's path on success. Idempotent: a finished build is reused.
set -eu

version="v3.22.0"
kube_major=1
kube_minor=37
cache="${1:-${XEMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xema}/helm}"
bin="$cache/helm-$version-k8s$kube_major.$kube_minor"

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
for pkg in pkg/lint/rules pkg/chartutil; do
	ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=$kube_major -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$kube_minor"
done
GOBIN="$tmp" CGO_ENABLED=0 go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version"
mv "$tmp/helm" "$bin"
echo "$bin"
