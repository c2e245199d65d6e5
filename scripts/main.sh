#!/usr/bin/env bash
# Run the main job: ./scripts/main.sh [brokerconf run args...]
# Installs what it needs on first use; see scripts/bootstrap.sh. The set-up's wall time goes to
# `brokerconf run` (BROKERCONF_SETUP_SECONDS), which reports it with its own stages'.
set -euo pipefail
_bc_setup_began=$(date +%s.%N)
# shellcheck source=scripts/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
BROKERCONF_SETUP_SECONDS=$(awk -v a="$_bc_setup_began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
export BROKERCONF_SETUP_SECONDS
exec .venv/bin/brokerconf run "$@"
