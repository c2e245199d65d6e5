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


@pytest.fixture(scope="module", params=["sql", "fused"])
def engine(request):
    """Each analysis test runs on both engines (reports/pipeline/analyze.py, ``engine``): they
    must give the same verdicts, stats and anomaly rows."""
    return request.param
