"""`brokerconf chaos run`, `brokerconf analyze` (Spark) and the main job reach the same verdict on
the same history, from the one checker list its header carries (issue 27, "Two judges").

For every experiment file in chaos/experiments, a history of the file's shape
(tests/reports/experiment_histories.py: its workload, its nemeses, its [checkers]) with the
checker list `chaos run` writes, laid out as the main job lays out its chaos stage
(``chaos-<name>/history.jsonl``). The judges:

* `chaos run`'s: reports/judge.py `judge_run`, which writes verdict.json;
* the main job's: that verdict.json read back by its chaos stage (brokerconf/chaos_stage.py) and
  the stage's outcome, and its Spark stage (reports/pipeline/main_job.py `run_spark_stage`, the
  same analysis `brokerconf analyze` runs), in one Spark job over every history.

The judges read nothing but the history, so the history's shape is what they are compared on
here, in seconds and with every verdict value (true, false, unknown) among the files. A real short
run of every file (JVMs, a PostgreSQL, FUSE mounts: minutes) is compared the same way in
test_judges_agree_on_real_runs.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerconf import chaos_stage
from chaos.experiment_file import load_experiment
from reports.check_plan import MEASUREMENTS, checker_list_for, plan_checks
from reports.checkers import registry
from reports.judge import judge_run
from reports.run_record import read_record
from tests.reports.experiment_histories import experiment_files, synthetic_history

FILES = experiment_files()


def _header_list(exp) -> dict:
    return checker_list_for(exp.model_dump(mode="json"))


@pytest.fixture(scope="module")
def stage_dir(tmp_path_factory) -> Path:
    """The main job's run directory: one ``chaos-<file>/`` per experiment file, each judged by
    `chaos run` (verdict.json beside its history)."""
    out = tmp_path_factory.mktemp("main-job")
    for file in FILES:
        exp = load_experiment(file)
        run_dir = out / f"chaos-{file.stem}"
        synthetic_history(exp, run_dir / "history.jsonl", checkers=_header_list(exp))
        judge_run(run_dir, render=False)
    return out


@pytest.fixture(scope="module")
def spark_stage(_spark_lifetime, stage_dir) -> dict:
    from reports.pipeline.main_job import run_spark_stage

    stage = run_spark_stage(stage_dir, progress=lambda line: None, stop=False)
    assert stage is not None and stage["error"] is None, stage
    return {v["run"]: v for v in stage["verdicts"]}


def _planned_run(file: Path, stage_dir: Path) -> chaos_stage.PlannedRun:
    exp = load_experiment(file)
    return chaos_stage.PlannedRun(file, None, (), exp.duration_s, exp.name, exp.target.name,
                                  stage_dir / f"chaos-{file.stem}")


def test_the_histories_cover_every_verdict_value(stage_dir):
    """The comparison means something only if the judges had true, false and unknown to agree on."""
    values = {repr(chaos_stage._verdict_of(_planned_run(f, stage_dir), 0, [])["valid"]) for f in FILES}
    assert values == {"True", "False", "'unknown'"}, values


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_three_judges_agree_from_the_checker_list(file, stage_dir, spark_stage):
    history = stage_dir / f"chaos-{file.stem}" / "history.jsonl"
    record = read_record(history)
    plan = plan_checks(record)
    # the list the judges used is the one in the header, not one they decided again
    assert plan.source == "history" and record.checker_list == _header_list(load_experiment(file))
    chaos_verdict = chaos_stage._verdict_of(_planned_run(file, stage_dir), 0, [])  # verdict.json, as the stage reads it
    spark_verdict = spark_stage[chaos_verdict["run"]]
    counted_by_spark = {name for name in spark_verdict["checks"] if name not in MEASUREMENTS}
    assert set(chaos_verdict["checks"]) == counted_by_spark, (
        f"{file.name}: chaos run applied {sorted(chaos_verdict['checks'])}, Spark {sorted(counted_by_spark)}")
    # every check that counted is on the list, and the list's others say why they did not
    assert set(chaos_verdict["checks"]) <= set(plan.options), file.name
    assert set(chaos_verdict["not_applied"]) == (set(plan.skipped) | set(plan.options)) - set(chaos_verdict["checks"])
    for check, result in chaos_verdict["checks"].items():
        assert result["valid"] == spark_verdict["checks"][check]["valid"], f"{file.name}: {check}"
    assert chaos_verdict["valid"] == spark_verdict["valid"], (
        f"{file.name}: chaos run says {chaos_verdict['valid']}, Spark {spark_verdict['valid']}")
    # beside the verdict, what the ops' outcomes and latencies were: the same words from both
    # (throughput is left out: the Spark side's run span also covers the harness records)
    for name in ("outcomes", "latency"):
        assert spark_verdict["measurements"][name] == registry.describe(name, chaos_verdict["measurements"][name]), (
            f"{file.name}: {name}")
    # the main job's chaos stage fails on this run exactly when the run is not valid
    assert chaos_stage.stage_failed([chaos_verdict]) is (chaos_verdict["valid"] is not True)
