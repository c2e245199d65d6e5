"""`brokerconf analyze PATH`: histories -> checker jobs on Spark -> verdicts, anomalies, tables.

Writes to ``--out DIR``:
  verdicts.json       one verdict per run (merged: false > unknown > true), every check's result,
                      and every anomalous message id with its operations
  verdicts.parquet    one row per run and checker (run, target, checker, valid, reason, applicable)
  anomalies.parquet   one row per anomalous message (run, target, checker, kind, message_id, ops, detail)
  <table>.parquet     each table a checker declares beside its judge (reports/checkers/protocol.py,
                      `Table`): the measurements' rows (latency, throughput, downtime, ...)
  histories.parquet   the loaded ops, partitioned by run and target (when the input was JSON lines):
                      pass it as PATH next time to skip parsing
Exit status: 0 when no verdict is false, 1 when one is, 2 when the input cannot be analysed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from reports.checkers import registry
from reports.checkers.result import CheckResult
from reports.pipeline.cli_args import DEFAULT_ENGINE, ENGINES, add_arguments
from reports.pipeline.anomaly_schema import ANOMALY_SCHEMA
from reports.verdicts import UNKNOWN
from reports.pipeline.fused.engine import CHECKS as CHECKERS
from reports.pipeline.local_frame import LocalFrame
from reports.pipeline.load import Histories, HistoryNotFound, MalformedHistory, find_sources
from reports.pipeline.session import SessionError, check_master, get_session
from reports.pipeline.verdicts import apply_skipped_lines, run_verdicts


@dataclass
class Analysis:
    verdicts: list[dict]
    results: list[CheckResult]
    anomalies: list[dict]
    histories: Histories
    tables: dict = field(default_factory=dict)  # name -> DataFrame
    anomalies_df: object = None
    notes: list[str] = field(default_factory=list)  # how the input was read, where that is worth saying

    @property
    def valid(self):
        from reports.pipeline.verdicts import merge

        return merge(v["valid"] for v in self.verdicts)


def analyze(spark, path: str | Path, *, skip_malformed: bool = False, checkers: list[str] | None = None,
            max_downtime_s: float | None = None, duplicates_allowed: bool | None = None,
            histories: Histories | None = None, engine: str = DEFAULT_ENGINE,
            histories_out: str | Path | None = None, progress: Callable[[str], None] | None = None,
            split_rows: int | None = None) -> Analysis:
    """Run the checkers over every run found at ``path``: a Spark task per history file reads it
and computes each run's facts, and the driver judges them with reports/checkers
(reports/pipeline/fused/engine.py).

    ``max_downtime_s`` and ``duplicates_allowed`` apply to every run when given; when None, each
    run is judged with its experiment's own settings (the run record), else the defaults.

    ``engine``: "fused", the one engine (the former Spark SQL checkers are gone: issue 17).
    ``histories``: no longer taken (it was the SQL loader's DataFrame); must be None.

    ``histories_out``: where to write the loaded histories as Parquet (JSON lines input only).

    ``split_rows``: a history above this many rows (estimated) is read in pieces and judged in
    parts split by each checker's own key, then combined (reports/checkers/split.py); default
    the BROKERCONF_SPLIT_ROWS environment variable, else what one task's memory holds."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if histories is not None:
        raise ValueError("analyze reads the histories itself: pass their path, not a loaded DataFrame")
    options: dict[str, dict] = {"total_queue": {"duplicates_allowed": duplicates_allowed},
                                "failover_downtime": {"max_downtime_s": max_downtime_s}}
    names = checkers or list(CHECKERS)
    unknown = [n for n in names if n not in CHECKERS]
    if unknown:
        raise ValueError(f"unknown checker(s) {', '.join(unknown)}; known: {', '.join(CHECKERS)}")
    from reports.pipeline.fused.engine import NotLeanParquet, analyze_fused

    try:
        histories, results, anomaly_rows, anomalies_df, tables = analyze_fused(
            spark, path, names, options, skip_malformed=skip_malformed, parquet_out=histories_out, progress=progress,
            split_rows=split_rows)
    except NotLeanParquet as exc:
        raise HistoryNotFound(f"{exc}: written by the former SQL engine; analyse the run's history.jsonl") from exc
    notes: list[str] = list(histories.notes)
    skipped = histories.runs_with_skipped_lines()
    apply_skipped_lines(results, skipped)
    verdicts = run_verdicts(results, skipped)
    # A file whose every line was malformed has no ops, so no checker saw its run: say so.
    seen = {v["run"] for v in verdicts}
    for run, lines in sorted(skipped.items()):
        if run not in seen:
            verdicts.append({"run": run, "target": "unknown", "valid": UNKNOWN, "failed": [], "unknown": [],
                             "not_applicable": [], "skipped_lines": [m.describe() for m in lines], "checks": {}})
    if anomalies_df is None:
        anomalies_df = LocalFrame(spark, [], ANOMALY_SCHEMA)
    by_run: dict = {}
    for row in anomaly_rows:
        by_run.setdefault((row["run"], row["target"]), []).append(
            {k: row[k] for k in ("checker", "kind", "message_id", "ops", "detail")})
    for verdict in verdicts:
        verdict["anomalies"] = by_run.get((verdict["run"], verdict["target"]), [])
    return Analysis(verdicts, results, anomaly_rows, histories, tables, anomalies_df, notes)


def write(analysis: Analysis, out_dir: str | Path, *, spark) -> Path:
    """The verdicts, anomalies and tables (the histories' Parquet was written by `analyze`, given
    ``histories_out``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "verdicts.json").write_text(json.dumps(
        {"generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "valid": analysis.valid,
         "runs": analysis.verdicts}, indent=1, default=str))
    rows = [(r.run, r.target, r.checker, _text(r.valid), r.reason, r.applicable) for r in analysis.results]
    verdicts = LocalFrame(spark, rows, "run string, target string, checker string, valid string, reason string, "
                                       "applicable boolean")
    write_small(verdicts, out_dir / "verdicts.parquet")
    write_small(analysis.anomalies_df, out_dir / "anomalies.parquet")
    for name, table in analysis.tables.items():
        write_small(table, out_dir / f"{name}.parquet")
    return out_dir


def write_small(df, path: Path) -> None:
    """A result table (verdicts, anomalies, measurements: small by construction) as one Parquet
    file in a directory, as Spark writes it, by pyarrow on the driver: measured here, Spark's
    writer cost about a second per table, which was most of the analysis of a small history. A
    `LocalFrame` is written from its rows without any Spark job; a DataFrame is collected first."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    if isinstance(df, LocalFrame):
        table = df.to_arrow()
    else:
        from pyspark.sql.pandas.types import to_arrow_schema

        table = pa.Table.from_pylist([r.asDict(recursive=True) for r in df.collect()], schema=to_arrow_schema(df.schema))
    pq.write_table(table, path / "part-00000.parquet")
    (path / "_SUCCESS").touch()


def _text(valid) -> str:
    return {True: "true", False: "false"}.get(valid, "unknown")


def summary_lines(analysis: Analysis) -> list[str]:
    lines = []
    for v in analysis.verdicts:
        word = {True: "valid", False: "INVALID", UNKNOWN: "unknown"}[v["valid"]]
        parts = []
        for name, check in v["checks"].items():
            if not check["applicable"] or registry.is_measurement(name):
                continue  # a measurement is shown in its own words below
            mark = {True: "ok", False: "FAILED", UNKNOWN: "unknown"}[check["valid"]]
            parts.append(f"{name} {mark}" + (f" ({check['reason']})" if check["reason"] and check["valid"] is not True else ""))
        measured = v["checks"].get("failover_downtime", {})
        # a downtime the run's plan did not ask for (reports/check_plan.py) is not its figure
        downtime = measured.get("stats", {}).get("max_downtime_ms") if measured.get("applicable") else None
        if downtime is not None:
            parts.append(f"max failover downtime {downtime:.0f} ms")
        lines.append(f"{v['run']} [{v['target']}]: {word}; " + "; ".join(parts))
        for name, check in v["checks"].items():
            if registry.is_measurement(name):
                lines += [f"  {line}" for line in registry.describe(name, check)]
        for skipped in v["skipped_lines"][:3]:
            lines.append(f"  skipped {skipped}")
    return lines


# ---------------------------------------------------------------------- command line


def run(args: argparse.Namespace, *, progress: Callable[[str], None] = print) -> int:
    try:
        check_master(args.master)
        find_sources(args.path)
    except (SessionError, HistoryNotFound) as exc:
        print(f"brokerconf analyze: {exc}", file=sys.stderr)
        return 2
    try:
        from reports.pipeline.fused.split_job import split_rows_from_env

        split_rows_from_env()  # a bad threshold is a usage error before any Spark starts
    except ValueError as exc:
        print(f"brokerconf analyze: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else Path("reports/out") / datetime.now(timezone.utc).strftime("analysis-%Y%m%dT%H%M%SZ")
    try:
        spark = get_session(args.master)
    except SessionError as exc:
        print(f"brokerconf analyze: {exc}", file=sys.stderr)
        return 2
    progress(f"analysing {args.path} on {args.master}")
    try:
        analysis = analyze(spark, args.path, skip_malformed=args.skip_malformed, max_downtime_s=args.max_downtime,
                           duplicates_allowed=args.duplicates_allowed,
                           engine=getattr(args, "engine", DEFAULT_ENGINE), histories_out=out_dir / "histories.parquet",
                           progress=progress, split_rows=getattr(args, "split_rows", None))
    except (MalformedHistory, HistoryNotFound, FileExistsError) as exc:
        print(f"brokerconf analyze: {exc}", file=sys.stderr)
        return 2
    for note in analysis.notes:
        progress(f"note: {note}")
    write(analysis, out_dir, spark=spark)
    spark.catalog.clearCache()  # the tables are written; a session that lives on gets its memory back
    for line in summary_lines(analysis):
        progress(line)
    progress(f"{len(analysis.anomalies)} anomalous message(s); results in {out_dir.resolve()}")
    return 1 if any(v["valid"] is False for v in analysis.verdicts) else 0


def run_and_stop(args: argparse.Namespace) -> int:
    """`run`, then stop the Spark session: for a command line process, which ends after it."""
    from reports.pipeline.session import stop_session

    try:
        return run(args)
    finally:
        stop_session()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brokerconf analyze", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run_and_stop(parser.parse_args(argv))
if __name__ == "__main__":
    sys.exit(main())
