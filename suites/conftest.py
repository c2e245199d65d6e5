"""What every suite test shares, wherever the suites run (the main job's `brokerconf suite`, the test
command, a fault batch of tests/conformance/test_suite_can_fail.py, a container run)."""

from __future__ import annotations

from pathlib import Path

import pytest

SUITES = Path(__file__).resolve().parent

#: the bound that stops a hung suite test. A test may start its own brokers or cluster and wait out
#: their own bounds (an Artemis pair's start and formation: up to 230 s on a loaded 2-core machine),
#: which fail with the brokers' logs; pytest-timeout's stop leaves no such evidence, so it comes
#: after them. One value for every run of the suites: the test command's default (pyproject's
#: 120 s, for the project's own tests) once stopped a cluster test in CI that the main job would
#: have let finish. A test with a bound of its own (``@pytest.mark.timeout``) keeps it.
SUITE_TEST_BOUND_S = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # called with the whole session's items: the project's own tests keep the ini's bound
    for item in items:
        if item.path.resolve().is_relative_to(SUITES) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SUITE_TEST_BOUND_S))
