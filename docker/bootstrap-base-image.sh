#!/usr/bin/env bash
# Make sure the Debian base image the Dockerfiles build FROM exists, even without a registry.
#
#   docker/bootstrap-base-image.sh [--mirror URL] [--security-mirror URL] [--print-mirrors] [IMAGE]
#   (IMAGE default: debian:bookworm-slim)
#
# 1. the image is already present            -> reuse it (nothing is rebuilt)
# 2. `docker pull IMAGE` works               -> use the official image
# 3. otherwise (air-gapped: no registry, but a Debian mirror) -> `debootstrap --variant=minbase`
#    a minimal Debian into a temporary directory from the apt mirror this machine uses, and
#    `docker import` it under the same name, so the Dockerfiles build unchanged.
#
# The mirror is this machine's own: the first enabled `deb` source serving the suite in
# /etc/apt/sources.list or /etc/apt/sources.list.d/*.list (one-line format) and *.sources (deb822)
# (conformance/targets/apt_sources.py reads them). No mirror host is written in this repository:
# with none in apt's sources, give one. --print-mirrors prints the two mirrors and exits.
#
# Options and environment (an option beats its variable):
#   --mirror URL / BROKERCONF_DEBIAN_MIRROR                    mirror for the suite
#   --security-mirror URL / BROKERCONF_DEBIAN_SECURITY_MIRROR  mirror for <suite>-security (none found:
#                                                              the image's apt sources list the suite only)
#   BROKERCONF_DEBIAN_SUITE            the suite (default bookworm)
#   BROKERCONF_APT_ROOT                where etc/apt is read (default /)
#   BROKERCONF_SKIP_PULL=1             do not try the registry (saves the pull timeout offline)
#   BROKERCONF_PULL_TIMEOUT            seconds to wait for `docker pull` (default 60)
# Needs root (debootstrap) only in case 3. Prints what it did and how long it took.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
APT_SOURCES="$HERE/../conformance/targets/apt_sources.py"
SUITE="${BROKERCONF_DEBIAN_SUITE:-bookworm}"
PULL_TIMEOUT="${BROKERCONF_PULL_TIMEOUT:-60}"
LOCK="${BROKERCONF_BOOTSTRAP_LOCK:-/tmp/brokerconf-base-image.lock}"
APT_ROOT="${BROKERCONF_APT_ROOT:-/}"
MIRROR="${BROKERCONF_DEBIAN_MIRROR:-}"
SECURITY="${BROKERCONF_DEBIAN_SECURITY_MIRROR:-}"
PRINT_ONLY=0
IMAGE=""

usage() { echo "usage: $0 [--mirror URL] [--security-mirror URL] [--print-mirrors] [IMAGE]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --mirror|--security-mirror)
            [ $# -ge 2 ] && [ -n "$2" ] || { echo "bootstrap-base-image: error: $1 needs a URL" >&2; usage; }
            if [ "$1" = --mirror ]; then MIRROR="$2"; else SECURITY="$2"; fi
            shift 2 ;;
        --mirror=*) MIRROR="${1#*=}"; shift ;;
        --security-mirror=*) SECURITY="${1#*=}"; shift ;;
        --print-mirrors) PRINT_ONLY=1; shift ;;
        -h|--help) usage ;;
        -*) echo "bootstrap-base-image: error: unknown option $1" >&2; usage ;;
        *) [ -z "$IMAGE" ] || { echo "bootstrap-base-image: error: one IMAGE only (got $IMAGE and $1)" >&2; usage; }
           IMAGE="$1"; shift ;;
    esac
done
IMAGE="${IMAGE:-debian:bookworm-slim}"

say() { echo "bootstrap-base-image: $*" >&2; }
die() { say "error: $*"; exit 1; }

# The mirrors: given, else apt's own. Resolved up front so a machine without one hears it at once.
resolve_mirrors() {
    local found
    command -v python3 >/dev/null 2>&1 || die "python3 is needed to read apt's sources; install it, or pass --mirror URL"
    if [ -z "$MIRROR" ]; then
        # on success it prints the URI alone; on failure, why (what it read)
        found="$(python3 "$APT_SOURCES" mirror "$SUITE" --root "$APT_ROOT" 2>&1)" || \
            die "no Debian mirror to debootstrap $SUITE from: $found; pass --mirror URL or set BROKERCONF_DEBIAN_MIRROR"
        MIRROR="$found"
    fi
    if [ -z "$SECURITY" ]; then
        SECURITY="$(python3 "$APT_SOURCES" mirror "$SUITE-security" --root "$APT_ROOT" 2>/dev/null || true)"
    fi
}

if [ "$PRINT_ONLY" = 1 ]; then
    resolve_mirrors
    echo "mirror $MIRROR"
    echo "security-mirror ${SECURITY:-none}"
    exit 0
fi

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

resolve_mirrors
[ -n "$SECURITY" ] || say "note: no $SUITE-security source in apt's sources (nor --security-mirror): the image's apt sources list $SUITE only"

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
SOURCES
if [ -n "$SECURITY" ]; then
    cat >> "$ROOTFS/etc/apt/sources.list.d/debian.sources" <<SOURCES

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi
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
