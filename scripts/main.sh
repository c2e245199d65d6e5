#!/usr/bin/env bash
# Run the main job: ./scripts/main.sh [brokerconf run args...]
# Installs what it needs on first use; see scripts/bootstrap.sh. The set-up's wall time goes to
# `brokerconf run` (BROKERCONF_SETUP_SECONDS), which reports it with its own stages'.
set -euo pipefail
_bc_setup_began=$(date +%s.%N)
# The main job launches its brokers as local processes (the Debian package, the distribution under
# .tools/); the container images serve `--targets X:container` and the tests (scripts/test.sh). Unless
# a container target is asked for (or BROKERCONF_INSTALL_DOCKER is set), their set-up is left out
# here: the engine, a debootstrap base image and three image builds took 1 m 50 s of a fresh
# machine's 5 m 34 s set-up.
if [ -z "${BROKERCONF_INSTALL_DOCKER+set}" ] && [[ " $* " != *:container* ]]; then
    export BROKERCONF_INSTALL_DOCKER=0
fi
# Mosquitto and RabbitMQ serve the benchmarks, not the main job's targets (scripts/bootstrap.sh).
export BROKERCONF_INSTALL_BENCH_BROKERS="${BROKERCONF_INSTALL_BENCH_BROKERS:-0}"
# shellcheck source=scripts/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
BROKERCONF_SETUP_SECONDS=$(awk -v a="$_bc_setup_began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
export BROKERCONF_SETUP_SECONDS
exec .venv/bin/brokerconf run "$@"
