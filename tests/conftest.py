"""Under pytest-xdist (``BROKERCONF_TEST_WORKERS=2 ./scripts/test.sh``, issue 16): which tests must
stay on one worker. Serial runs are untouched; see conformance/xdist_groups.py.

* A module's tests that share a module-scoped fixture (a broker container, a real broker, a whole
  suite run) run on one worker, so the fixture starts once.
* Tests that use the Spark session or the session's fresh chaos runs (tests/reports/conftest.py)
  all run on one worker: one Spark session already keeps both cores busy (``local[*]``), so a
  second worker's JVM only competes for them, and each worker would make the fresh runs again.
  Measured on the loaded 2-core machine: ``tests/reports -m "not container"`` 259 s serially,
  348 s spread over two workers.
"""

from pathlib import Path

import pytest

from conformance import leak_plugin, xdist_groups

TESTS = Path(__file__).resolve().parent

#: session fixtures whose tests share one worker, and the group they share
ONE_WORKER = {"_spark_lifetime": "spark", "real_runs": "spark", "fresh_queue_run": "spark", "fresh_topic_run": "spark",
              # test_suite_can_fail.py: its runs start together on the worker of its first test
              "broken_runs": "broken_suite_runs"}


def pytest_configure(config):
    # Issue 20: the run fails if a test left a process, namespace, mount, container or temporary
    # directory behind (conformance/leak_plugin.py); registered here so `-p` is not needed.
    if not config.pluginmanager.is_registered(leak_plugin):
        config.pluginmanager.register(leak_plugin, "brokerconf-leak-check")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (conformance/xdist_groups.py)
def pytest_collection_modifyitems(config, items):
    if not xdist_groups.in_worker(config):
        return
    for item in items:
        if not Path(str(item.path)).is_relative_to(TESTS) or item.get_closest_marker("xdist_group"):
            continue
        group = next((ONE_WORKER[name] for name in item.fixturenames if name in ONE_WORKER), None)
        group = group or xdist_groups.shared_fixture_group(item)
        if group is not None:
            xdist_groups.add_group(item, group)
