#!/usr/bin/env bash
# Run the test suite: ./scripts/test.sh [pytest args...]
# Installs what it needs (virtualenv, Python packages, and as root on Debian the
# real-broker packages) on first use; see scripts/bootstrap.sh.
set -euo pipefail
# shellcheck source=scripts/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
exec .venv/bin/python -m pytest "$@"
