#!/usr/bin/env bash
# Run the test suite: ./scripts/test.sh [pytest args...]
# Installs what it needs (virtualenv, Python packages, and as root on Debian the
# real-broker packages) on first use; see scripts/bootstrap.sh.
#
# BROKERCONF_TEST_WORKERS=N (N > 1) runs the tests on N pytest-xdist workers
# (-n N --dist loadgroup: each conformance suite module's tests of one target, and a module's
# tests that share a module-scoped fixture, stay on one worker; see conformance/xdist_groups.py),
# the costliest groups first by their recorded cost (--no-loadscope-reorder; conformance/schedule.py).
# Unset, empty or 1: one process, as before.
# Every run ends with its 30 slowest tests (--durations=30) and, with workers, each worker's busy
# time and idle tail, so growth is visible; its timing (each worker's units in order, each unit's
# cost) is written to reports/out/test-timing.json (scripts/record_costs.py reads it; a
# --timing-report of your own wins).
set -euo pipefail
workers="${BROKERCONF_TEST_WORKERS:-1}"
if ! [[ "$workers" =~ ^[1-9][0-9]*$ ]]; then
    echo "scripts/test.sh: BROKERCONF_TEST_WORKERS must be a whole number of workers >= 1, not '$workers'" >&2
    exit 2
fi
# shellcheck source=scripts/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
parallel=()
if [ "$workers" -gt 1 ]; then
    parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
fi
exec .venv/bin/python -m pytest "${parallel[@]}" --durations=30 --timing-report reports/out/test-timing.json "$@"
