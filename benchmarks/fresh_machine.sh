#!/usr/bin/env bash
# The README's first command on a fresh machine, timed: ./scripts/main.sh in a new container of
# benchmarks/fresh_machine/Dockerfile (Debian 12 with Python, Java 17, Maven, gcc, git; none of
# brokerconf's packages or caches), on a clean clone of this repository's HEAD.
#
#   benchmarks/fresh_machine.sh [--setup-only] [OUT_DIR] [-- brokerconf run arguments...]
#
# --setup-only: the main job's set-up alone (scripts/bootstrap.sh as main.sh runs it, no Docker),
# to time a change to it in ~2 minutes instead of the whole job's ~16.
# Prints the set-up's log lines and the main job's end (stage and target times), then the wall
# time; the run's reports (timing.json, results.json, matrix.json) are copied to OUT_DIR (default
# /tmp/brokerconf-fresh-machine-<time>). Needs root and the Docker engine (docker/start-engine.sh).
#
# What the container shares with this machine, and why:
# - the network (--network host): the registries are reached as this machine reaches them, through
#   its own mirror settings; nothing of a registry is written here. The brokers listen on loopback
#   ports the run picks free, so do not run another main job beside it;
# - its TLS trust store (the CA bundle and Java's cacerts from /etc/ssl/certs), copied in before the
#   run (not mounted over: package scripts write there, ssl-cert's for PostgreSQL), with the
#   certificate variables of its environment: a machine of this kind trusts its egress the same way;
# - its Go toolchain (/usr/local/go, read-only, with the machine's go env settings): part of the
#   machine kind, not of brokerconf's set-up. Go's module and build caches start empty;
# - what root on a machine may do, as far as this engine grants it (--privileged is refused where
#   the engine itself runs with reduced capabilities): network namespaces (NET_ADMIN, SYS_ADMIN,
#   no seccomp filter) and FUSE mounts (/dev/fuse).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
ROOT="$(dirname "$HERE")"
OUT="/tmp/brokerconf-fresh-machine-$(date -u +%Y%m%dT%H%M%SZ)"
JOB=main
if [ "${1:-}" = "--setup-only" ]; then JOB=setup; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then OUT="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
IMAGE=brokerconf/fresh-machine:bookworm
BASE_IMAGE="${BROKERCONF_BASE_IMAGE:-debian:bookworm-slim}"

say() { echo "fresh-machine: $*" >&2; }
if [ "$(id -u)" != 0 ]; then say "error: needs root (the container gets root's capabilities for network namespaces and FUSE)"; exit 2; fi
if ! docker info >/dev/null 2>&1; then
    say "error: the Docker engine does not answer; start it with docker/start-engine.sh"; exit 1
fi
GO_ROOT="$(go env GOROOT 2>/dev/null || true)"
if [ -z "$GO_ROOT" ]; then say "error: no Go toolchain on this machine to lend the container"; exit 1; fi

"$ROOT/docker/bootstrap-base-image.sh" "$BASE_IMAGE"
docker build --pull=false --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$IMAGE" "$HERE/fresh_machine" >&2

mkdir -p "$OUT"
env_args=()
for name in SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE PIP_CERT GIT_SSL_CAINFO \
            PIP_DEFAULT_TIMEOUT PIP_DISABLE_PIP_VERSION_CHECK; do
    [ -n "${!name:-}" ] && env_args+=(-e "$name=${!name}")
done
for name in GOPROXY GOFLAGS GOTOOLCHAIN GONOSUMDB GOPRIVATE GOSUMDB; do
    value="$(go env "$name")"
    [ -n "$value" ] && env_args+=(-e "$name=$value")
done
pip_conf=()
[ -f /etc/pip.conf ] && pip_conf=(-v /etc/pip.conf:/etc/pip.conf:ro)
maven_conf=()
[ -f /etc/maven/settings.xml ] && maven_conf=(-v /etc/maven/settings.xml:/etc/maven/settings.xml:ro)

name="brokerconf-fresh-machine-$$"
# The container is removed by its name, which this script chose (and on interruption too).
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM HUP
began=$(date +%s)
status=0
docker run --name "$name" --network host --shm-size 4g --cap-add NET_ADMIN --cap-add SYS_ADMIN \
    --device /dev/fuse --security-opt apparmor=unconfined --security-opt seccomp=unconfined \
    -v "$ROOT/.git:/source.git:ro" -v "$GO_ROOT:/usr/local/go:ro" -v /etc/ssl/certs:/machine-certs:ro \
    -v "$OUT:/out" "${pip_conf[@]}" "${maven_conf[@]}" "${env_args[@]}" \
    -e "JOB=$JOB" -e PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    "$IMAGE" bash -c 'set -e
        cp /machine-certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
        if [ -f /machine-certs/java/cacerts ]; then cp /machine-certs/java/cacerts /etc/ssl/certs/java/cacerts; fi
        git clone -q /source.git /root/brokerconf && cd /root/brokerconf
        began=$(date +%s)
        status=0
        if [ "$JOB" = setup ]; then
            # time: the CPU of the set-up (user and sys, every step it waited for) beside its wall time
            time BROKERCONF_INSTALL_DOCKER=0 BROKERCONF_INSTALL_BENCH_BROKERS=0 bash scripts/bootstrap.sh || status=$?
            echo "fresh-machine: scripts/bootstrap.sh exited $status after $(( $(date +%s) - began )) s"
        else
            ./scripts/main.sh --out /out "$@" || status=$?
            echo "fresh-machine: ./scripts/main.sh exited $status after $(( $(date +%s) - began )) s (set-up included)"
        fi
        exit $status' bash "$@" &
# in the background and waited for: bash runs a trap only once its foreground command has ended, so
# an interrupted run would otherwise leave the container running until the main job inside it ends
wait $! || status=$?
say "container ran $(( $(date +%s) - began )) s; exit $status; reports in $OUT"
exit $status
