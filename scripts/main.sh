#!/usr/bin/env bash
# Run the main job: ./scripts/main.sh [brokerconf run args...]
# Installs what it needs on first use; see scripts/bootstrap.sh.
set -euo pipefail
# shellcheck source=scripts/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
exec .venv/bin/brokerconf run "$@"
