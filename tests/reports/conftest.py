"""One SparkSession for the whole test process (a JVM takes seconds to start), and short real
chaos runs made once per session for the tests that check real histories."""

from __future__ import annotations

from pathlib import Path

import pytest

import chaos
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


@pytest.fixture(scope="module")
def engine():
    """The analysis engine (one since issue 17: reports/pipeline/analyze.py, ``engine``)."""
    return "fused"


# ---------------------------------------------------------------------- fresh real runs
# Tests that check the pipeline on *real* chaos runs used to look for earlier runs under
# reports/out and skip without one, so on a fresh clone (CI) they checked nothing. They now make
# their own: a short run of a shipped experiment on the reference broker (no installed broker
# needed), once per test session, in a temporary directory. Earlier runs under reports/out are
# still checked beside it where a test wants them.

def _short_run(tmp_path_factory, file_name: str, duration_s: float) -> Path:
    from chaos.experiment import run_experiment
    from reports.check_plan import checker_list_for
    from reports.judge import judge_run
    from chaos.experiment_file import load_experiment, with_overrides

    experiments = Path(chaos.__file__).resolve().parent / "experiments"
    exp = with_overrides(load_experiment(experiments / file_name), duration_s=duration_s)
    out = tmp_path_factory.mktemp(Path(file_name).stem)
    # as `brokerconf chaos run` does: the run's checker list in the history's header
    run_experiment(exp, out, progress=lambda line: None, checkers=checker_list_for(exp.model_dump(mode="json")))
    judge_run(out)
    assert (out / "history.jsonl").stat().st_size > 0 and (out / "verdict.json").is_file(), out
    return out


@pytest.fixture(scope="session")
def fresh_queue_run(tmp_path_factory) -> Path:
    """A run directory (history.jsonl, verdict.json, report.html) of experiment 1, cut to 8 s:
    the reference broker (a process) under persistent queue load with failover clients, killed
    once (the schedule's first kill falls at 5 s). About 10 s."""
    return _short_run(tmp_path_factory, "reference-kill-restart.toml", 8)


@pytest.fixture(scope="session")
def fresh_topic_run(tmp_path_factory) -> Path:
    """A run directory of experiment 4 (a slow topic subscriber behind the fault proxy), cut to
    8 s. About 15 s."""
    return _short_run(tmp_path_factory, "slow-topic-subscriber.toml", 8)
