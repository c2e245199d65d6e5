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
from reports.check_plan import checker_list_for
from reports.judge import judge_run
from tests.reports.experiment_histories import experiment_files, synthetic_history
from tests.reports.judge_agreement import assert_three_judges_agree

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
    return {"stage": stage, "verdicts": {v["run"]: v for v in stage["verdicts"]}}


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
    chaos_verdict = chaos_stage._verdict_of(_planned_run(file, stage_dir), 0, [])  # verdict.json, as the stage reads it
    assert_three_judges_agree(file.name, stage_dir / f"chaos-{file.stem}" / "history.jsonl",
                              _header_list(load_experiment(file)), chaos_verdict, spark_stage["stage"],
                              spark_stage["verdicts"][chaos_verdict["run"]])
