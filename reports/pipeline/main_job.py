"""The main job's Spark stage (`brokerconf run`, after the chaos stage): the run's chaos histories
analysed by the pipeline on an embedded local Spark session (reports/pipeline/analyze.py), the
comparison across targets built in Spark SQL (reports/pipeline/compare.py: the conformance matrix
beside the checkers' verdicts), and what the run report shows of both.

Everything lands in ``<run>/spark/``: ``verdicts.json`` and the Parquet tables `brokerconf
analyze` writes, ``comparison.json`` and ``comparison.html``. The stage returns a summary for the
report and the console (`stage_summary`); a stage that could not run (no Java, a history Spark
cannot read) says why in its ``error`` instead of ending the main job.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from reports.pipeline.cli_args import DEFAULT_ENGINE, LOCAL

SPARK_DIR = "spark"
CHAOS_HISTORIES = "chaos-*/history.jsonl"


def run_spark_stage(out_dir: Path, *, progress: Callable[[str], None] = print, engine: str = DEFAULT_ENGINE,
                    master: str = LOCAL, stop: bool = True) -> dict | None:
    """Analyse ``out_dir``'s chaos histories and compare its targets; None when there is no history.
    ``stop``: stop the Spark session at the end (the main job; a test sharing a session keeps it)."""
    histories = sorted(out_dir.glob(CHAOS_HISTORIES))
    if not histories:
        return None
    from reports.pipeline.analyze import analyze, write
    from reports.pipeline.compare import CompareError, compare
    from reports.pipeline.compare import write as write_comparison
    from reports.pipeline.load import HistoryNotFound, MalformedHistory
    from reports.pipeline.session import SessionError, get_session, stop_session
    from reports.render.comparison_report import render_comparison_report

    spark_dir = out_dir / SPARK_DIR
    stage: dict = {"engine": engine, "master": master, "histories": [str(h.relative_to(out_dir)) for h in histories],
                   "dir": SPARK_DIR, "verdicts": [], "notes": [], "comparison": None, "error": None}
    started = time.monotonic()
    progress(f"\nspark: analysing {len(histories)} chaos histories with the {engine} engine on {master} (embedded)")
    try:
        progress("spark: starting the session (a local JVM)")
        spark = get_session(master)
        progress(f"spark: session up after {time.monotonic() - started:.0f} s; running the checker jobs")
        analysis = analyze(spark, out_dir, engine=engine, progress=lambda line: progress(f"spark: {line}"))
        write(analysis, spark_dir, spark=spark)
        stage["notes"] = list(analysis.notes)
        stage["verdicts"] = [_compact(v) for v in analysis.verdicts]
        for verdict in stage["verdicts"]:
            progress(f"spark: {verdict['run']} [{verdict['target']}]: valid = {verdict['valid']}"
                     + (f"; failed {', '.join(verdict['failed'])}" if verdict["failed"] else "")
                     + (f"; unknown {', '.join(verdict['unknown'])}" if verdict["unknown"] else ""))
        progress("spark: comparing targets (conformance matrix and checker verdicts, Spark SQL)")
        inputs = [p for p in (out_dir / "matrix.json", spark_dir / "verdicts.json") if p.is_file()]
        comparison = compare(spark, inputs)
        path = write_comparison(comparison, spark_dir)
        page = render_comparison_report(path, [p for p in inputs if p.name == "matrix.json"],
                                        spark_dir / "comparison.html")
        stage["comparison"] = {"checkers": comparison["checkers"], "targets": comparison["targets"],
                               "page": str(page.relative_to(out_dir))}
        spark.catalog.clearCache()
    except (SessionError, MalformedHistory, HistoryNotFound, CompareError, OSError) as exc:
        stage["error"] = f"{type(exc).__name__}: {exc}"
        progress(f"spark: the stage could not finish: {stage['error']}")
    finally:
        if stop:
            stop_session()  # the JVM's memory goes back before the report is written
    stage["seconds"] = round(time.monotonic() - started, 1)
    progress(f"spark: done in {stage['seconds']:.0f} s; results in {spark_dir}")
    return stage


def _compact(verdict: dict) -> dict:
    """A run's Spark verdict without its anomaly list (verdicts.json keeps every one); the
    measurements apart from the checks, each in its own words (reports/checkers/registry.py,
    `describe`): shown beside the verdict, never as a check of it."""
    from reports.checkers import registry

    measured = {name for name in verdict["checks"] if registry.is_measurement(name)}
    checks = {name: {"valid": c["valid"], "reason": c["reason"]}
              for name, c in verdict["checks"].items() if c.get("applicable", True) and name not in measured}
    measurements = {name: registry.describe(name, verdict["checks"][name]) for name in sorted(measured)}
    return {"run": verdict["run"], "target": verdict["target"], "valid": verdict["valid"],
            "failed": verdict["failed"], "unknown": verdict["unknown"], "checks": checks,
            "measurements": measurements,
            "anomalies": len(verdict.get("anomalies") or []), "skipped_lines": verdict.get("skipped_lines") or []}


def stage_failed(stage: dict | None) -> bool:
    """The stage broke, or a run's Spark verdict is not true (no evidence is not a pass)."""
    if stage is None:
        return False
    return bool(stage["error"]) or any(v["valid"] is not True for v in stage["verdicts"])
