"""`brokerconf chaos run`, `brokerconf analyze` (Spark) and the main job reach the same verdict on
a REAL short run of every experiment file, from the one checker list its history's header carries
(issue 27, "Two judges": "a test proves it on every experiment file's short run").

test_judges_agree_on_every_experiment.py compares the judges on synthetic histories of each file's
shape; here each file really runs, on its own target (the reference broker as a process or in this
one, ActiveMQ and Artemis as local JVMs, PostgreSQL for the JDBC store, FUSE mounts for the
simulated NFS), as short as is still honest (real_runs.py `short_plan`), made by the main job's own
chaos stage (`chaos_stage.run_all`: a `brokerconf chaos run` process per run, three at a time, each
judged into its verdict.json) and laid out as it lays them out. Then ONE Spark stage
(reports/pipeline/main_job.py `run_spark_stage`, the analysis `brokerconf analyze` runs) judges them
all. The judges:

* `chaos run`'s: reports/judge.py, verdict.json, read back as the main job's chaos stage reads it
  (`chaos_stage._verdict_of`), and the stage's outcome (`chaos_stage.stage_failed`);
* Spark's verdict of the same run, and the main job's Spark-stage outcome (`main_job.stage_failed`).

A run where nothing happened would agree vacuously, so each run must also have exercised its file:
every [[nemesis]] entry struck (a completed fault line in the history) and the clients completed
operations (confirmed sends, and messages received).

Cost, measured on the shared 2-core machine (`time pytest <this module>`, no main job running at its end):
6 min 59 s, of which the 19 runs 5 min 35 s (three at a time; each 18-118 s with its brokers'
start-up, drain and judging, 1018 s in all) and the Spark stage 45 s. Beside a main job: 10 min.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.experiment_file import FaultPlane
from chaos.history import read_history
from reports.check_plan import checker_list_for
from reports.pipeline import main_job
from tests.reports.judge_agreement import assert_three_judges_agree
from tests.reports.real_runs import experiment_files

FILES = experiment_files()

# Spark's tests share one worker (tests/conftest.py: by the fixtures used here, `real_runs` and
# `_spark_lifetime`). Real brokers: the module makes every file's run before its first test, the
# ones on ActiveMQ and Artemis included. The bound covers that first test's set-up: every run,
# three at a time (a JVM pair's run with its drain can take minutes under load), and the Spark stage
pytestmark = [pytest.mark.slow, pytest.mark.real_broker, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def made(real_runs):
    """Every file's run, made (the ones this machine can run), in the session's main-job directory."""
    real_runs.ensure(FILES)
    return real_runs


@pytest.fixture(scope="module")
def spark_stage(_spark_lifetime, made) -> dict:
    """One Spark stage over every run, as the main job runs it after its chaos stage."""
    stage = main_job.run_spark_stage(made.root, progress=lambda line: None, stop=False)
    assert stage is not None and stage["error"] is None, stage
    return stage


def _stage_verdict(made, file: Path) -> dict:
    """The run's verdict as the main job's chaos stage reads it: verdict.json, or why there is none."""
    from conformance.requirements import skip_or_fail

    if file.stem in made.missing:
        skip_or_fail(*made.missing[file.stem])
    verdict = made.verdicts[file.stem]
    assert "run" in verdict, f"{file.name}: the run gave no verdict: {verdict.get('error')}"
    return verdict


def _fault_step(entry) -> str:
    """The step a [[nemesis]] entry's fault is recorded as: its kind, but for a store's fault
    (lock-loss) the entry's `fault` (partition, expire...), which its nemesis runs
    (chaos/lockloss_fault.py)."""
    return entry.fault if entry.plane is FaultPlane.STORE else entry.kind


def _faults_struck(events: list[dict], step: str) -> list[dict]:
    """The history's completed fault steps named ``step`` (a nemesis records a step's start and its
    end; an end carrying an error is a step that failed)."""
    return [e for e in events if e["process"] == "nemesis" and e["f"] == step and not e.get("error")
            and (e.get("value") or {}).get("phase") == "end"]


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_the_run_exercised_its_experiment(file, made):
    verdict = _stage_verdict(made, file)
    run, exp = made.plan(file)
    events = read_history(run.run_dir / "history.jsonl")
    for step in {_fault_step(entry) for entry in exp.nemesis}:
        assert _faults_struck(events, step), f"{file.name}: its {step} fault never struck in {run.duration_s} s"
    assert verdict["run_stats"]["faults"] >= len(exp.nemesis), verdict["run_stats"]
    clients = [e for e in events if e["type"] == "ok" and e["process"] not in ("nemesis", "harness")]
    sent = [e for e in clients if e["f"] == "send"]
    received = [e for e in clients if e["f"] == "receive" or (e["f"] == "drain" and e.get("value"))]
    assert sent and received, f"{file.name}: {len(sent)} confirmed sends, {len(received)} receives"


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_three_judges_agree_from_the_checker_list(file, made, spark_stage):
    chaos_verdict = _stage_verdict(made, file)
    run, exp = made.plan(file)
    spark_verdict = {v["run"]: v for v in spark_stage["verdicts"]}[chaos_verdict["run"]]
    assert_three_judges_agree(file.name, run.run_dir / "history.jsonl", checker_list_for(exp.model_dump(mode="json")),
                              chaos_verdict, spark_stage, spark_verdict)


def test_one_spark_stage_judged_every_run(made, spark_stage):
    """The stage read every run's history, once, and nothing else."""
    histories = {f"chaos-{stem}/history.jsonl" for stem in made.verdicts}
    assert histories and set(spark_stage["histories"]) == histories, spark_stage["histories"]
    assert len(spark_stage["verdicts"]) == len(histories)
