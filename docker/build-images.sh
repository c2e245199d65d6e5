#!/usr/bin/env bash
# Build brokerconf's local images; idempotent (Docker's layer cache makes a rebuild a no-op).
#
#   docker/build-images.sh            base image (pulled or debootstrapped) + brokerconf/activemq-classic:5.17
#                                     + brokerconf/artemis:<version pinned in machinery/pins.toml>
#                                     + brokerconf/toxiproxy:<version pinned there>
#
# The Artemis image is built from the binary distribution cached at
# .tools/artemis/apache-artemis-<version>-bin.tar.gz (fetched with Maven, which reads this machine's
# mirror settings, when absent), verified against the sha512 in pins.toml. It is labelled with that
# sha512 and a digest of docker/artemis/; when the existing image carries both, nothing is rebuilt
# (not even the archive is needed).
#
# Environment:
#   BROKERCONF_BASE_IMAGE      base the Dockerfiles build FROM (default debian:bookworm-slim)
#   BROKERCONF_ACTIVEMQ_IMAGE  tag of the ActiveMQ Classic image (default brokerconf/activemq-classic:5.17)
#   BROKERCONF_REBUILD=1       rebuild without the layer cache (e.g. to pick up Debian security updates)
#   BROKERCONF_BUILD_ARTEMIS=0 leave the Artemis image out
#   BROKERCONF_BUILD_TOXIPROXY=0 leave the Toxiproxy image out (built from .tools/bin/toxiproxy-server,
#                              so the bootstrap installs that binary before it builds the images)
# Prints how long each step took.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
ROOT="$(dirname "$HERE")"
BASE_IMAGE="${BROKERCONF_BASE_IMAGE:-debian:bookworm-slim}"
ACTIVEMQ_IMAGE="${BROKERCONF_ACTIVEMQ_IMAGE:-brokerconf/activemq-classic:5.17}"

say() { echo "build-images: $*" >&2; }

if ! docker info >/dev/null 2>&1; then
    say "error: the Docker engine does not answer (\`docker info\` fails); start it with $HERE/start-engine.sh" \
        "(as root), or install it with \`apt-get install docker.io\`"
    exit 1
fi

t0=$SECONDS
"$HERE/bootstrap-base-image.sh" "$BASE_IMAGE"
say "base image $BASE_IMAGE ready in $((SECONDS - t0))s"

t1=$SECONDS
# --pull=false: never reach for a registry; the base is local now (pulled or bootstrapped).
extra=()
[ "${BROKERCONF_REBUILD:-0}" = "1" ] && extra+=(--no-cache)
docker build --pull=false --force-rm "${extra[@]}" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -t "$ACTIVEMQ_IMAGE" "$HERE/activemq-classic" >&2
say "built $ACTIVEMQ_IMAGE in $((SECONDS - t1))s"

if [ "${BROKERCONF_BUILD_ARTEMIS:-1}" != "0" ]; then
    t2=$SECONDS
    "$HERE/artemis/build.sh" "$BASE_IMAGE" "$ROOT"
    say "Artemis image ready in $((SECONDS - t2))s"
fi
if [ "${BROKERCONF_BUILD_TOXIPROXY:-1}" != "0" ]; then
    t3=$SECONDS
    "$HERE/toxiproxy/build.sh" "$BASE_IMAGE" "$ROOT"
    say "Toxiproxy image step done in $((SECONDS - t3))s"
fi
say "all images ready in $((SECONDS - t0))s"
