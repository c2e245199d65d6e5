#!/usr/bin/env bash
# Build brokerconf/artemis:<version> from the Artemis binary distribution pinned in
# machinery/pins.toml ([artemis]: version, sha512). Called by docker/build-images.sh.
#
#   docker/artemis/build.sh [BASE_IMAGE [PROJECT_ROOT]]
#
# 1. The image exists with the labels org.brokerconf.artemis.sha512 (the pinned sha512) and
#    org.brokerconf.artemis.recipe (sha256 of this directory's Dockerfile and docker-run.sh):
#    nothing to do.
# 2. Else take .tools/artemis/apache-artemis-<version>-bin.tar.gz, or fetch it there with
#    `mvn dependency:copy` (Maven reads this machine's mirror settings), verify its sha512 against
#    the pin, and `docker build` from a temporary context holding the archive and this directory.
# Environment: BROKERCONF_REBUILD=1 rebuilds without the layer cache and ignores the labels.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
BASE_IMAGE="${1:-debian:bookworm-slim}"
ROOT="${2:-$(cd "$HERE/../.." && pwd -P)}"
PINS="$ROOT/machinery/pins.toml"

say() { echo "artemis/build.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# `key = "value"` from the [artemis] table of pins.toml (flat table, one key per line)
pin() {
    awk -v key="$1" '
        /^\[/ { in_table = ($0 == "[artemis]") }
        in_table && $1 == key && $2 == "=" { v = $3; gsub(/"/, "", v); print v; exit }
    ' "$PINS"
}
[ -f "$PINS" ] || die "no $PINS"
VERSION="$(pin version)"
SHA512="$(pin sha512)"
GROUP="$(pin group)"
ARTIFACT="$(pin artifact)"
CLASSIFIER="$(pin classifier)"
PACKAGING="$(pin packaging)"
[ -n "$VERSION" ] && [ -n "$SHA512" ] || die "$PINS has no [artemis] version and sha512"
IMAGE="brokerconf/artemis:$VERSION"
ARCHIVE_NAME="$ARTIFACT-$VERSION-$CLASSIFIER.$PACKAGING"
CACHE="$ROOT/.tools/artemis"
ARCHIVE="$CACHE/$ARCHIVE_NAME"

RECIPE="$(cat "$HERE/Dockerfile" "$HERE/docker-run.sh" | sha256sum | cut -d' ' -f1)"
label() { docker image inspect --format "{{ index .Config.Labels \"$1\" }}" "$IMAGE" 2>/dev/null || true; }
if [ "${BROKERCONF_REBUILD:-0}" != "1" ] && [ "$(label org.brokerconf.artemis.sha512)" = "$SHA512" ] \
        && [ "$(label org.brokerconf.artemis.recipe)" = "$RECIPE" ]; then
    say "$IMAGE is up to date (archive sha512 and recipe match its labels)"
    exit 0
fi

if [ ! -f "$ARCHIVE" ]; then
    command -v mvn >/dev/null 2>&1 || die "$ARCHIVE is missing and Maven is not installed to fetch it" \
        "(apt-get install maven, or place the archive there)"
    say "fetching $GROUP:$ARTIFACT:$VERSION:$PACKAGING:$CLASSIFIER with Maven into $CACHE..."
    mkdir -p "$CACHE"
    mvn -q -B dependency:copy "-Dartifact=$GROUP:$ARTIFACT:$VERSION:$PACKAGING:$CLASSIFIER" \
        "-DoutputDirectory=$CACHE" >&2 || die "mvn could not fetch the Artemis $VERSION distribution (see above)"
    [ -f "$ARCHIVE" ] || die "mvn finished but $ARCHIVE is not there"
fi
got="$(sha512sum "$ARCHIVE" | cut -d' ' -f1)"
[ "$got" = "$SHA512" ] || die "$ARCHIVE has sha512 $got, but pins.toml pins $SHA512; delete the file to fetch it again"

CONTEXT="$(mktemp -d "${TMPDIR:-/tmp}/brokerconf-artemis-context.XXXXXX")"
trap 'rm -rf "$CONTEXT"' EXIT
cp "$HERE/Dockerfile" "$HERE/docker-run.sh" "$CONTEXT/"
ln "$ARCHIVE" "$CONTEXT/$ARCHIVE_NAME" 2>/dev/null || cp "$ARCHIVE" "$CONTEXT/$ARCHIVE_NAME"

extra=()
[ "${BROKERCONF_REBUILD:-0}" = "1" ] && extra+=(--no-cache)
say "building $IMAGE from $ARCHIVE_NAME on $BASE_IMAGE..."
# --pull=false: never reach for a registry; the base is local (pulled or bootstrapped).
docker build --pull=false --force-rm "${extra[@]}" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "ARTEMIS_VERSION=$VERSION" \
    --label "org.brokerconf.artemis.sha512=$SHA512" --label "org.brokerconf.artemis.recipe=$RECIPE" \
    -t "$IMAGE" "$CONTEXT" >&2
say "built $IMAGE"
