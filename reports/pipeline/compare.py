"""Compare implementations: many runs' verdicts and conformance matrices joined into two tables.

* target x spec ID: every ``matrix.json`` found (conformance/matrix.py) contributes each target's
  outcome per catalogued statement; outcomes of the same target in several runs merge the way a
  matrix merges tests (failed beats error beats known deviation beats passed beats not
  applicable), and the per-run outcomes are kept beside the merged one;
* target x checker: every ``verdicts.json`` written by `brokerconf analyze` contributes each
  run's checker results; several runs of one target merge like Jepsen (false beats unknown beats
  true); a checker that had nothing to judge in a run does not count, nor does a measurement
  (latency, throughput, outcomes: figures, always "true", never a verdict; reports/checkers/registry.py).

Targets are compared by kind: a chaos run's target ``reference:process`` (how the broker was
launched) is the matrix's ``reference``. The tables are written as JSON (``comparison.json``) and
Parquet (``specs.parquet``, ``checkers.parquet``); the HTML rendering reads the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from reports.checkers.registry import is_measurement

MATRIX_FILE, VERDICTS_FILE = "matrix.json", "verdicts.json"
SPEC_OUTCOMES = ("failed", "error", "known deviation", "passed", "not applicable")  # conformance/matrix.py
VERDICT_ORDER = ("false", "unknown", "true")


class CompareError(ValueError):
    """Nothing to compare, or a file that is not what its name says."""


def base_target(name: str) -> str:
    return name.split(":", 1)[0]


def find_inputs(paths: list[str | Path]) -> tuple[list[Path], list[Path]]:
    matrices, verdicts = [], []
    for path in map(Path, paths):
        if path.is_file():
            (matrices if path.name == MATRIX_FILE else verdicts).append(path)
        elif path.is_dir():
            matrices += sorted(path.rglob(MATRIX_FILE))
            verdicts += sorted(path.rglob(VERDICTS_FILE))
        else:
            raise CompareError(f"{path}: no such file or directory")
    if not matrices and not verdicts:
        raise CompareError(f"no {MATRIX_FILE} or {VERDICTS_FILE} under {', '.join(map(str, paths))}: run "
                           "`brokerconf suite` or `brokerconf analyze` first")
    return matrices, verdicts


def _spec_rows(matrices: list[Path]) -> list[tuple]:
    rows = []
    for path in matrices:
        try:
            matrix = json.loads(path.read_text())
            label = matrix.get("generated_at") or path.parent.name
            for target, specs in matrix["matrix"].items():
                for spec_id, cell in specs.items():
                    rows.append((base_target(target), spec_id, cell["outcome"], f"{path.parent.name}@{label}"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CompareError(f"{path}: not a conformance matrix ({type(exc).__name__}: {exc}); "
                               "expected the matrix.json `brokerconf suite` writes") from None
    return rows


def _checker_rows(verdicts: list[Path]) -> list[tuple]:
    rows = []
    for path in verdicts:
        try:
            for run in json.loads(path.read_text())["runs"]:
                for name, check in run["checks"].items():
                    if check["applicable"] and not is_measurement(name):
                        rows.append((base_target(run["target"]), name, json.dumps(check["valid"]).strip('"'), run["run"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CompareError(f"{path}: not a verdicts file ({type(exc).__name__}: {exc}); "
                               "expected the verdicts.json `brokerconf analyze` writes") from None
    return rows


def _merged(df, key: str, order: tuple[str, ...]):
    """Merge ``outcome`` per (target, key) by the rank in ``order`` (first wins), keeping each run's."""
    rank = F.lit(len(order) + 1)  # an outcome not in the list ranks last
    for position, outcome in reversed(list(enumerate(order, start=1))):
        rank = F.when(F.col("outcome") == outcome, position).otherwise(rank)
    return (df.withColumn("rank", rank)
            .groupBy("target", key)
            .agg(F.min("rank").alias("rank"), F.collect_list(F.struct("run", "outcome")).alias("runs"))
            .withColumn("outcome", F.coalesce(F.element_at(F.array(*[F.lit(o) for o in order]), F.col("rank").cast("int")),
                                              F.lit("unknown")))
            .drop("rank"))


def compare(spark: SparkSession, paths: list[str | Path]) -> dict:
    """{"specs": {spec: {target: outcome}}, "checkers": {checker: {target: valid}}, "targets": [...],
    "runs": {...}} plus the Spark tables under "_tables"."""
    matrices, verdicts = find_inputs(paths)
    spec_df = spark.createDataFrame(_spec_rows(matrices), "target string, spec string, outcome string, run string")
    checker_df = spark.createDataFrame(_checker_rows(verdicts), "target string, checker string, outcome string, run string")
    specs = _merged(spec_df, "spec", SPEC_OUTCOMES)
    checkers = _merged(checker_df, "checker", VERDICT_ORDER)
    result: dict = {"specs": {}, "checkers": {}, "spec_runs": {}, "checker_runs": {}}
    for row in specs.orderBy("spec", "target").collect():
        result["specs"].setdefault(row["spec"], {})[row["target"]] = row["outcome"]
        result["spec_runs"].setdefault(row["spec"], {})[row["target"]] = {e["run"]: e["outcome"] for e in row["runs"]}
    for row in checkers.orderBy("checker", "target").collect():
        result["checkers"].setdefault(row["checker"], {})[row["target"]] = _verdict(row["outcome"])
        result["checker_runs"].setdefault(row["checker"], {})[row["target"]] = {
            e["run"]: _verdict(e["outcome"]) for e in row["runs"]}
    result["targets"] = sorted({t for cells in (*result["specs"].values(), *result["checkers"].values()) for t in cells})
    result["inputs"] = {"matrices": [str(p) for p in matrices], "verdicts": [str(p) for p in verdicts]}
    result["_tables"] = {"specs": specs, "checkers": checkers}
    return result


def _verdict(text: str):
    return {"true": True, "false": False}.get(text, "unknown")


def write(result: dict, out_dir: str | Path) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "comparison.json").write_text(json.dumps({k: v for k, v in result.items() if k != "_tables"}, indent=1))
    for name, table in result["_tables"].items():
        table.coalesce(1).write.mode("overwrite").parquet(str(out_dir / f"{name}.parquet"))
    return out_dir / "comparison.json"


def main(argv: list[str] | None = None) -> int:
    """``python -m reports.pipeline.compare PATH... --out DIR``: exit 2 when there is nothing to compare."""
    import argparse
    import sys

    from reports.pipeline.session import get_session, stop_session

    parser = argparse.ArgumentParser(prog="python -m reports.pipeline.compare", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="directories (searched recursively) or files")
    parser.add_argument("--out", default="reports/out/comparison", metavar="DIR")
    args = parser.parse_args(argv)
    from reports.render.comparison_report import render_comparison_report

    try:
        matrices, _ = find_inputs(args.paths)
        result = compare(get_session(), args.paths)
        path = write(result, args.out)
    except CompareError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    finally:
        stop_session()
    page = render_comparison_report(path, matrices, Path(args.out) / "index.html")
    print(f"{len(result['targets'])} targets, {len(result['specs'])} spec IDs, {len(result['checkers'])} checkers: {path}"
          f"\nreport: {page.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
