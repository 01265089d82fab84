#!/bin/sh
# Builds the xema OCI image with podman (`make image`): a static binary (CGO_ENABLED=0,
# stamped like `make build`) and the files of deploy/image/Containerfile staged in
# bin/image/, then `podman build` of that context. Nothing is pulled (FROM scratch); the CA
# bundle is the host's (Debian's ca-certificates). Podman's layer cache keeps every layer but
# the binary's from one build to the next, and Go's build cache the compiled packages.
#
# Usage: deploy/image/build.sh [IMAGE]   (default: xema:VERSION)
# VERSION and REVISION default to `git describe` and `git rev-parse HEAD`. CONTAINERS_CONF
# defaults to deploy/image/containers.conf (runc, cgroupfs: the settings this VM needs).
# Prints the image name on success.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
image=${1:-xema:$version}
ca=/etc/ssl/certs/ca-certificates.crt
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/deploy/image/containers.conf}"

[ -s "$ca" ] || { echo "build.sh: no CA bundle at $ca (install ca-certificates)" >&2; exit 1; }
command -v podman >/dev/null 2>&1 || { echo "build.sh: podman is not installed (apt-get install podman runc)" >&2; exit 1; }

ctx="$root/bin/image"
rm -rf "$ctx"
mkdir -p "$ctx/data"
buildinfo=github.com/xemahq/xema/internal/buildinfo
CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X $buildinfo.commit=$revision -X $buildinfo.version=$version" \
	-o "$ctx/xema" ./cmd/xema
cp "$ca" "$ctx/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\nxema:x:65532:65532:xema:/data:/sbin/nologin\n' >"$ctx/passwd"
printf 'root:x:0:\nxema:x:65532:\n' >"$ctx/group"

previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
podman build --quiet --file deploy/image/Containerfile \
	--build-arg VERSION="$version" --build-arg REVISION="$revision" \
	--tag "$image" "$ctx" >/dev/null
# The image this tag named before, now untagged: not kept to pile up build after build.
current=$(podman image inspect --format '{{.Id}}' "$image")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
	podman rmi "$previous" >/dev/null 2>&1 || true
fi
echo "$image"
