"""Under pytest-xdist (``BROKERCONF_TEST_WORKERS=2 ./scripts/test.sh``, issue 16): a module's tests
that share a module-scoped fixture (a broker container, a real broker, a whole suite run) run on
one worker, so the fixture starts once; see conformance/xdist_groups.py. Serial runs are untouched."""

from pathlib import Path

import pytest

from conformance import xdist_groups

TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (conformance/xdist_groups.py)
def pytest_collection_modifyitems(config, items):
    if not xdist_groups.in_worker(config):
        return
    for item in items:
        if not Path(str(item.path)).is_relative_to(TESTS) or item.get_closest_marker("xdist_group"):
            continue
        group = xdist_groups.shared_fixture_group(item)
        if group is not None:
            xdist_groups.add_group(item, group)
