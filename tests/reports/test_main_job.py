"""The main job's Spark stage (reports/pipeline/main_job.py) and what the run report shows of it;
and `brokerconf analyze` on a lone history copied into an empty directory, judged with the
settings its harness records carry (chaos/history.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reports.pipeline.analyze import analyze
from reports.pipeline.main_job import SPARK_DIR, run_spark_stage, stage_failed
from reports.render.run_report import write_run_report
from reports.run_record import pipeline_record_of_file

MATRIX = {"targets": {"reference": {"kind": "reference", "launch": "in-process", "available": True, "reason": ""}},
          "summary": {"reference": {"applicable": 0, "listed": 0, "checked": 0, "passed": 0, "failed": 0,
                                    "known_deviation": 0, "not_checked": 0}},
          "catalogue": {}, "matrix": {"reference": {}}}


def stage(**extra) -> dict:
    return {"engine": "fused", "master": "local[*]", "histories": ["chaos-x/history.jsonl"], "dir": SPARK_DIR,
            "notes": [], "error": None, "seconds": 12.0,
            "verdicts": [{"run": "x-1", "target": "reference", "valid": False, "failed": ["total_queue"], "unknown": [],
                          "checks": {"total_queue": {"valid": False, "reason": "1 lost: m-7"}},
                          "anomalies": 1, "skipped_lines": []}],
            "comparison": {"checkers": {"total_queue": {"reference": False}}, "targets": ["reference"],
                           "page": "spark/comparison.html"}, **extra}


def test_report_names_the_engine_and_shows_the_spark_verdicts(tmp_path):
    page = write_run_report(tmp_path, "r1", MATRIX, seconds=1.0, chaos=[], spark=stage()).read_text()
    assert "judged by Spark" in page and "Engine: <b>fused</b>" in page and "local[*]" in page
    assert "x-1" in page and "1 lost: m-7" in page and "spark/comparison.html" in page
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["spark"]["verdicts"][0]["valid"] is False


def test_a_spark_stage_that_broke_is_shown_and_fails_the_job(tmp_path):
    broken = stage(error="SessionError: Spark needs Java 17", verdicts=[], comparison=None)
    page = write_run_report(tmp_path, "r1", MATRIX, seconds=1.0, spark=broken).read_text()
    assert "did not finish: SessionError: Spark needs Java 17" in page
    assert stage_failed(broken) and stage_failed(stage()) and not stage_failed(None)
    assert not stage_failed(stage(verdicts=[{**stage()["verdicts"][0], "valid": True}]))


def test_no_chaos_history_no_spark_stage(tmp_path):
    assert run_spark_stage(tmp_path, progress=lambda line: None) is None


@pytest.mark.slow
def test_spark_stage_judges_every_history_and_compares_the_targets(spark, tmp_path, fresh_queue_run, fresh_topic_run):
    for name, run in (("chaos-kill", fresh_queue_run), ("chaos-slow", fresh_topic_run)):
        shutil.copytree(run, tmp_path / name)
    lines: list[str] = []
    result = run_spark_stage(tmp_path, progress=lines.append, stop=False)
    assert result["error"] is None, result
    written = {json.loads((tmp_path / d / "verdict.json").read_text())["run"]: d for d in ("chaos-kill", "chaos-slow")}
    assert {v["run"] for v in result["verdicts"]} == set(written)
    assert (tmp_path / SPARK_DIR / "verdicts.json").is_file() and (tmp_path / SPARK_DIR / "comparison.json").is_file()
    assert result["comparison"]["targets"] == ["reference"] and "total_queue" in result["comparison"]["checkers"]
    assert any("fused engine" in line for line in lines) and any("valid =" in line for line in lines), lines


@pytest.mark.slow
def test_analyze_judges_a_lone_history_with_the_settings_it_carries(spark, tmp_path, fresh_queue_run):
    """Experiment 1 allows duplicates (a kill may redeliver): the lone copy, without the run
    directory's verdict.json, still says so, from its harness records."""
    lone = tmp_path / "anywhere" / "history.jsonl"
    lone.parent.mkdir()
    shutil.copy(fresh_queue_run / "history.jsonl", lone)
    in_place = analyze(spark, fresh_queue_run, engine="fused")
    alone = analyze(spark, lone, engine="fused")
    # what the engine's tasks read for the lone file: its own harness records, nothing beside it
    assert not (lone.parent / "verdict.json").exists()
    assert pipeline_record_of_file(str(lone))["checker_options"]["duplicates_allowed"] is True
    assert [(v["run"], v["valid"], {n: c["valid"] for n, c in v["checks"].items()}) for v in alone.verdicts] == \
        [(v["run"], v["valid"], {n: c["valid"] for n, c in v["checks"].items()}) for v in in_place.verdicts]
    total = alone.verdicts[0]["checks"]["total_queue"]
    assert total["stats"] == in_place.verdicts[0]["checks"]["total_queue"]["stats"]
