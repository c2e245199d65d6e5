"""The seed a run's schedule was drawn from travels from the history's first line (the harness's
experiment record, chaos/experiment.py) to the verdict, the console summary, the run's page and the
main job's report, so a user can replay the run with `brokerconf chaos run FILE --seed N`."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.experiment import experiment_record
from chaos.experiment_file import load_experiment, with_overrides
from chaos.history import HARNESS_EXPERIMENT, History, message_value
from reports.judge import judge_run, summary
from reports.render.run_report import write_run_report
from reports.run_record import read_record, record_of
from tests.reports.test_main_job import MATRIX

KILL_RESTART = Path(__file__).resolve().parents[2] / "chaos" / "experiments" / "reference-kill-restart.toml"


def a_run(run_dir: Path, seed: int | None) -> Path:
    """A short history as `brokerconf chaos run` writes it: its experiment record first (the file's
    seed, or ``seed`` as --seed gives it), one message sent, received and acknowledged, a drain."""
    exp = with_overrides(load_experiment(KILL_RESTART), seed=seed)
    history = History(run_dir / "history.jsonl", run="reference-kill-restart-20260101T000000Z",
                      target="reference:process")
    history.harness(HARNESS_EXPERIMENT, experiment_record(exp))
    value = message_value("m-0", 0, 0, exp.workload.destination)
    history.ok(history.invoke(0, "send", value, node="A"), value, node="A")
    history.ok(history.invoke(1, "receive", node="A"), value, node="A")
    history.ok(history.invoke(1, "ack", value, node="A"), value, node="A")
    history.ok(history.invoke(2, "drain", node="A"), [], node="A")
    history.close()
    return history.path


def test_the_header_records_the_seed_used(tmp_path):
    assert read_record(a_run(tmp_path / "own", None)).seed == 1  # the file's seed = 1
    path = a_run(tmp_path / "given", 7)
    assert read_record(path).seed == 7
    first = json.loads(path.read_text().splitlines()[0])
    assert first["process"] == "harness" and first["value"]["experiment"]["seed"] == 7


def test_an_old_history_has_no_seed():
    assert record_of([{"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "send", "value": None}]).seed is None


def test_the_verdict_the_summary_and_the_runs_page_show_the_seed(tmp_path):
    a_run(tmp_path, 7)
    verdict = judge_run(tmp_path)
    assert verdict["seed"] == 7 and json.loads((tmp_path / "verdict.json").read_text())["seed"] == 7
    assert "(seed 7, " in summary(verdict).splitlines()[0]
    page = Path(verdict["report"]).read_text()
    assert "seed 7</span>" in page and "--seed 7" in page


def test_the_main_jobs_report_shows_each_chaos_runs_seed(tmp_path):
    a_run(tmp_path / "chaos-x", 7)
    verdict = judge_run(tmp_path / "chaos-x")
    page = write_run_report(tmp_path, "r1", MATRIX, seconds=1.0, chaos=[verdict]).read_text()
    assert "reference-kill-restart<br>seed 7</td>" in page
    assert json.loads((tmp_path / "results.json").read_text())["chaos"][0]["seed"] == 7
