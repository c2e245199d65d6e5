"""One SparkSession for the whole test process (a JVM takes seconds to start), and short real
chaos runs made once per session for the tests that check real histories."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.pipeline.session import LOCAL, get_session, stop_session
from tests.reports.real_runs import EXPERIMENTS, RealRuns


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


@pytest.fixture(scope="module")
def engine():
    """The analysis engine (one since issue 17: reports/pipeline/analyze.py, ``engine``)."""
    return "fused"


# ---------------------------------------------------------------------- fresh real runs
# Tests that check the pipeline on *real* chaos runs used to look for earlier runs under
# reports/out and skip without one, so on a fresh clone (CI) they checked nothing. They now use the
# session's own short runs of the shipped experiment files (real_runs.py: made by the main job's
# chaos stage, each once per test session, in a temporary directory); the two below need no
# installed broker. Earlier runs under reports/out are still checked beside them where a test wants
# them.


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> RealRuns:
    """The session's real short runs, one per experiment file, made when first asked for."""
    return RealRuns(tmp_path_factory.mktemp("main-job"))


def _made(real_runs: RealRuns, file_name: str) -> Path:
    out = real_runs.run_dir(EXPERIMENTS / file_name)
    assert (out / "history.jsonl").stat().st_size > 0 and (out / "verdict.json").is_file(), \
        real_runs.verdicts[Path(file_name).stem]
    return out


@pytest.fixture(scope="session")
def fresh_queue_run(real_runs) -> Path:
    """A run directory (history.jsonl, verdict.json, report.html) of experiment 1, cut short: the
    reference broker (a process) under persistent queue load with failover clients, killed once
    (the first kill falls at 5 s; 9 s in all). 43 s with start-up, drain and judging, beside a main
    job on the 2-core machine."""
    return _made(real_runs, "reference-kill-restart.toml")


@pytest.fixture(scope="session")
def fresh_topic_run(real_runs) -> Path:
    """A run directory of experiment 4 (a slow topic subscriber behind the fault proxy), cut short
    to the first latency and bandwidth faults and their heals (10 s). 42 s in all, measured as above."""
    return _made(real_runs, "slow-topic-subscriber.toml")
