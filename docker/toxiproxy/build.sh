#!/usr/bin/env bash
# Build brokerconf/toxiproxy:<version> from .tools/bin/toxiproxy-server, the binary
# machinery/faultproxy/install.py builds at the version pinned in machinery/pins.toml
# ([toxiproxy] version). Called by docker/build-images.sh.
#
#   docker/toxiproxy/build.sh [BASE_IMAGE [PROJECT_ROOT]]
#
# Skipped (exit 0, with a note) when the binary is not there: the bootstrap builds it first, and
# without it the container Toxiproxy is reported unavailable with the reason. When the image's
# labels name the binary's sha256 and this directory's Dockerfile digest, nothing is rebuilt.
# Environment: BROKERCONF_REBUILD=1 rebuilds without the layer cache and ignores the labels.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
BASE_IMAGE="${1:-debian:bookworm-slim}"
ROOT="${2:-$(cd "$HERE/../.." && pwd -P)}"
PINS="$ROOT/machinery/pins.toml"
BINARY="${BROKERCONF_TOOLS_DIR:-$ROOT/.tools}/bin/toxiproxy-server"

say() { echo "toxiproxy/build.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ -f "$PINS" ] || die "no $PINS"
VERSION="$(awk '/^\[/ { t = ($0 == "[toxiproxy]") } t && $1 == "version" { v = $3; gsub(/"/, "", v); print v; exit }' "$PINS")"
[ -n "$VERSION" ] || die "$PINS has no [toxiproxy] version"
IMAGE="brokerconf/toxiproxy:$VERSION"

if [ ! -x "$BINARY" ]; then
    say "note: $BINARY is not built (brokerconf targets install toxiproxy); $IMAGE is not built"
    exit 0
fi
have="$("$BINARY" -version 2>/dev/null | awk '{ print $3 }')"
[ "$have" = "$VERSION" ] || die "$BINARY names version '$have', not the pinned $VERSION; rebuild it with: brokerconf targets install toxiproxy"

BINARY_SHA="$(sha256sum "$BINARY" | cut -d' ' -f1)"
RECIPE="$(sha256sum "$HERE/Dockerfile" | cut -d' ' -f1)"
label() { docker image inspect --format "{{ index .Config.Labels \"$1\" }}" "$IMAGE" 2>/dev/null || true; }
if [ "${BROKERCONF_REBUILD:-0}" != "1" ] && [ "$(label org.brokerconf.toxiproxy.binary)" = "$BINARY_SHA" ] \
        && [ "$(label org.brokerconf.toxiproxy.recipe)" = "$RECIPE" ]; then
    say "$IMAGE is up to date (binary and recipe match its labels)"
    exit 0
fi

CONTEXT="$(mktemp -d "${TMPDIR:-/tmp}/brokerconf-toxiproxy-context.XXXXXX")"
trap 'rm -rf "$CONTEXT"' EXIT
cp "$HERE/Dockerfile" "$BINARY" "$CONTEXT/"
extra=()
[ "${BROKERCONF_REBUILD:-0}" = "1" ] && extra+=(--no-cache)
say "building $IMAGE on $BASE_IMAGE..."
# --pull=false: never reach for a registry; the base is local (pulled or bootstrapped).
docker build --pull=false --force-rm "${extra[@]}" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "TOXIPROXY_VERSION=$VERSION" \
    --label "org.brokerconf.toxiproxy.binary=$BINARY_SHA" --label "org.brokerconf.toxiproxy.recipe=$RECIPE" \
    -t "$IMAGE" "$CONTEXT" >&2
say "built $IMAGE"
