"""One SparkSession for the whole test process: a JVM takes seconds to start."""

from __future__ import annotations

import pytest

from reports.pipeline.session import LOCAL, get_session, stop_session


@pytest.fixture(scope="session")
def _spark_lifetime():
    yield
    stop_session()


@pytest.fixture
def spark(_spark_lifetime):
    # get_session returns the running local session; it starts one again only if a test (the
    # cluster test) switched the process to another master.
    return get_session(LOCAL)


#: pytest-timeout's default (pyproject: 120 s) interrupts a test with a signal; if that lands in
#: the middle of a Spark job, the py4j connection to the shared JVM is left half-read and every
#: later Spark test of the process fails with it (seen in CI: one slow analysis on a busy machine,
#: then 66 errors). A Spark test gets a longer bound instead, unless it sets its own.
SPARK_TEST_TIMEOUT_S = 600


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("timeout") is None and "/tests/reports/" in str(item.fspath):
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))


@pytest.fixture(scope="module", params=["sql", "fused"])
def engine(request):
    """Each analysis test runs on both engines (reports/pipeline/analyze.py, ``engine``): they
    must give the same verdicts, stats and anomaly rows."""
    return request.param
