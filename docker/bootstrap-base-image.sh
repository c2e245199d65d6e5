#!/usr/bin/env bash
# Make sure the Debian base image the Dockerfiles build FROM exists, even without a registry.
#
#   docker/bootstrap-base-image.sh [IMAGE]      (default: debian:bookworm-slim)
#
# 1. the image is already present            -> reuse it (nothing is rebuilt)
# 2. `docker pull IMAGE` works               -> use the official image
# 3. otherwise (air-gapped: no registry, but a Debian mirror) -> `debootstrap --variant=minbase`
#    a minimal Debian into a temporary directory from the apt mirror this machine uses, and
#    `docker import` it under the same name, so the Dockerfiles build unchanged.
#
# Environment:
#   BROKERCONF_DEBIAN_MIRROR           mirror for the suite (default: the one in /etc/apt/sources.list*)
#   BROKERCONF_DEBIAN_SECURITY_MIRROR  mirror for <suite>-security (default: from apt sources, else
#                                      http://deb.debian.org/debian-security)
#   BROKERCONF_SKIP_PULL=1             do not try the registry (saves the pull timeout offline)
#   BROKERCONF_PULL_TIMEOUT            seconds to wait for `docker pull` (default 60)
# Needs root (debootstrap) only in case 3. Prints what it did and how long it took.
set -euo pipefail

IMAGE="${1:-debian:bookworm-slim}"
SUITE="${BROKERCONF_DEBIAN_SUITE:-bookworm}"
PULL_TIMEOUT="${BROKERCONF_PULL_TIMEOUT:-60}"
LOCK="${BROKERCONF_BOOTSTRAP_LOCK:-/tmp/brokerconf-base-image.lock}"

say() { echo "bootstrap-base-image: $*" >&2; }
die() { say "error: $*"; exit 1; }

docker info >/dev/null 2>&1 || die "the Docker engine does not answer (\`docker info\` fails); start it with docker/start-engine.sh"

# One bootstrap at a time (parallel CI jobs on one engine): the second waits and then reuses.
exec 9>"$LOCK"
flock 9

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    how="$(docker image inspect --format '{{ index .Config.Labels "org.brokerconf.base-image" }}' "$IMAGE" 2>/dev/null || true)"
    say "reusing existing image $IMAGE${how:+ (built locally: $how)}"
    exit 0
fi

if [ "${BROKERCONF_SKIP_PULL:-0}" != "1" ]; then
    say "trying \`docker pull $IMAGE\` (up to ${PULL_TIMEOUT}s)..."
    if timeout "$PULL_TIMEOUT" docker pull "$IMAGE" >&2; then
        say "pulled $IMAGE from its registry"
        exit 0
    fi
    say "cannot pull $IMAGE (no registry reachable?); building it locally with debootstrap"
fi

[ "$(id -u)" = "0" ] || die "building $IMAGE with debootstrap needs root; run \`sudo $0\`"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing; install it with \`apt-get install debootstrap\`"

# The first http(s) URI of an apt source for Debian's main archive (one-line or deb822 format),
# skipping -security archives and third-party repositories.
apt_uris() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        sed -n -e 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\(https\?:\/\/[^[:space:]]*\).*/\2/p' \
               -e 's/^[[:space:]]*URIs:[[:space:]]*\(https\?:\/\/[^[:space:]]*\).*/\1/p' "$f"
    done
}
MIRROR="${BROKERCONF_DEBIAN_MIRROR:-$(apt_uris | grep -E '/debian/?$' | head -n1 || true)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY="${BROKERCONF_DEBIAN_SECURITY_MIRROR:-$(apt_uris | grep -E '/debian-security/?$' | head -n1 || true)}"
SECURITY="${SECURITY:-http://deb.debian.org/debian-security}"

start=$SECONDS
WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/brokerconf-rootfs.XXXXXX")"
cleanup() { rm -rf --one-file-system "$WORK"; }
trap cleanup EXIT
ROOTFS="$WORK/rootfs"

say "debootstrap --variant=minbase $SUITE from $MIRROR into $ROOTFS..."
if ! debootstrap --variant=minbase --components=main "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
    tail -n 30 "$WORK/debootstrap.log" >&2
    [ -f "$ROOTFS/debootstrap/debootstrap.log" ] && tail -n 30 "$ROOTFS/debootstrap/debootstrap.log" >&2
    die "debootstrap failed (log above); check that $MIRROR serves $SUITE, or set BROKERCONF_DEBIAN_MIRROR"
fi
say "debootstrap done in $((SECONDS - start))s"

# Make it look like the official slim image: same apt sources layout (deb822), no docs/man pages
# in later installs, no apt caches, and an empty machine-id.
rm -f "$ROOTFS/etc/apt/sources.list"
cat > "$ROOTFS/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
cat > "$ROOTFS/etc/dpkg/dpkg.cfg.d/docker-slim" <<'SLIM'
# like the official -slim images: no documentation in installed packages
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
SLIM
cat > "$ROOTFS/etc/apt/apt.conf.d/docker-clean" <<'CLEAN'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CLEAN
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/debootstrap
rm -rf "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/*
: > "$ROOTFS/etc/machine-id"

say "importing $ROOTFS as $IMAGE..."
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --change "LABEL org.brokerconf.base-image=\"debootstrap --variant=minbase $SUITE $MIRROR\"" \
    - "$IMAGE" >&2
say "built $IMAGE locally in $((SECONDS - start))s (debootstrap + import); rerunning reuses it"
