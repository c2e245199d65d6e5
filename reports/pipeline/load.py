"""Load histories into Spark: JSON lines (DESIGN.md, "History format") or Parquet written back.

`load(spark, path)` takes a history file, a run directory (its ``history.jsonl``), a tree of runs
(every ``history.jsonl`` below it) or a Parquet directory written by `write_parquet`, and returns
`Histories`:

* ``ops``: one row per history line, with an explicit schema. ``value`` stays a JSON string (it is
  a message, a drain's list of messages, a nemesis step's details...), ``process`` is a string
  (an integer or ``nemesis``), ``file`` names the source, and ``msgs`` holds the messages the
  value carries, parsed once at load (``id``, ``producer``, ``seq``, ``destination``, ``group``,
  ``consumer``, ``subscriber``, ``redelivered``; null when the value is not a message);
* `messages(ops)`: one row per message an op carries; a drain's list is exploded to one row per
  message, ``pos`` keeping its place in the list.

The Parquet written back keeps ``msgs``, so a later analysis parses no JSON at all.

Harness records (``process: "harness"``: the experiment's settings, the broker's counters, the
run's outcome; chaos/history.py) are not operations: they are kept out of ``ops`` and become
``Histories.records``, one run record per (run, target) in the shape the checkers read
(reports/run_record.py), so a history analysed alone carries its own settings and counters. The
Parquet written back keeps them beside the data (``_records.json``).

A malformed line (not JSON, not an object, a required field missing or of the wrong type, an
unknown op type) raises `MalformedHistory` naming the file and line number. With
``skip_malformed=True`` such lines are dropped and listed in ``Histories.malformed``; every
verdict of a run that lost a line is then ``unknown`` (reports/pipeline/verdicts.py), because the
missing line might have been the send or receive that explains an anomaly.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

HISTORY_FILE = "history.jsonl"
OP_TYPES = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"
HARNESS = "harness"  # chaos/history.py: the harness's own records
# beside the Parquet data, so skipped lines survive the round trip; Spark skips names starting "_"
MALFORMED_FILE = "_malformed.json"
RECORDS_FILE = "_records.json"  # the harness records' run records, beside the Parquet data
UNKNOWN_TARGET = "unknown"

_CORRUPT = "_corrupt_record"
_NOT_AN_OBJECT = "not a JSON object with the history's field types (index and time are integers)"

#: the line schema: explicit, so a stray field or type never changes what the jobs see
LINE_SCHEMA = T.StructType([
    T.StructField("index", T.LongType()),
    T.StructField("time", T.LongType()),
    T.StructField("process", T.StringType()),
    T.StructField("type", T.StringType()),
    T.StructField("f", T.StringType()),
    # A StringType field keeps the raw JSON text of an object or array: one column for any value.
    T.StructField("value", T.StringType()),
    T.StructField("target", T.StringType()),
    T.StructField("node", T.StringType()),
    T.StructField("run", T.StringType()),
    T.StructField("error", T.StringType()),
    T.StructField(_CORRUPT, T.StringType()),
])

MESSAGE_SCHEMA = T.StructType([
    T.StructField("id", T.StringType()),
    T.StructField("producer", T.LongType()),
    T.StructField("seq", T.LongType()),
    T.StructField("destination", T.StringType()),
    T.StructField("group", T.StringType()),
    T.StructField("consumer", T.LongType()),
    T.StructField("subscriber", T.LongType()),
    T.StructField("redelivered", T.BooleanType()),
])
_VALUE_OBJECT = T.StructType([*MESSAGE_SCHEMA.fields,
                              T.StructField("messages", T.ArrayType(MESSAGE_SCHEMA))])

#: columns of `Histories.ops`, in order
OP_COLUMNS = ("run", "target", "node", "file", "index", "time", "process", "type", "f", "value", "error", "msgs")


class MalformedHistory(ValueError):
    """A history line is not a valid operation; the message names the file and line."""


class HistoryNotFound(FileNotFoundError):
    """The path holds no history the pipeline can read; the message says what was looked for."""


@dataclass(frozen=True)
class Malformed:
    file: str
    line: int
    run: str
    reason: str
    text: str

    def describe(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}; the line starts {self.text[:60]!r}"


@dataclass
class Histories:
    ops: DataFrame
    malformed: list[Malformed] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    #: (run, target) -> the run record its harness records make (reports/run_record.py,
    #: ``as_pipeline_record``); a run without harness records (an old history) is absent
    records: dict[tuple[str, str], dict] = field(default_factory=dict)

    def runs_with_skipped_lines(self) -> dict[str, list[Malformed]]:
        out: dict[str, list[Malformed]] = {}
        for m in self.malformed:
            out.setdefault(m.run, []).append(m)
        return out


# ---------------------------------------------------------------------- finding files


def find_sources(path: str | Path) -> tuple[str, list[Path]]:
    """("jsonl", files) or ("parquet", [dir]) for ``path``; HistoryNotFound when there is none."""
    path = Path(path)
    if not path.exists():
        raise HistoryNotFound(f"{path}: no such file or directory; give a history.jsonl, a run directory "
                              "or a directory of runs")
    if path.is_file():
        if path.suffix == ".parquet":
            return "parquet", [path]
        return "jsonl", [path]
    if _is_parquet_dir(path):
        return "parquet", [path]
    files = sorted(path.rglob(HISTORY_FILE))
    if not files:
        raise HistoryNotFound(f"{path}: no {HISTORY_FILE} in it or below it, and it is not a Parquet directory "
                              "written by `brokerconf analyze`")
    return "jsonl", files


def _is_parquet_dir(path: Path) -> bool:
    return (path / "_SUCCESS").exists() or any(path.glob("*.parquet")) or any(path.glob("run=*"))


# ---------------------------------------------------------------------- loading


def load(spark: SparkSession, path: str | Path, *, skip_malformed: bool = False) -> Histories:
    kind, sources = find_sources(path)
    if kind == "parquet":
        return load_parquet(spark, sources[0])
    return load_jsonl(spark, sources, skip_malformed=skip_malformed)


def load_jsonl(spark: SparkSession, files: list[Path], *, skip_malformed: bool = False) -> Histories:
    paths = [str(Path(f).resolve()) for f in files]
    raw = (spark.read.schema(LINE_SCHEMA)
           .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT)
           .json(paths)
           .withColumn("file", F.input_file_name()))
    # A run without a `run` field takes its directory's name; the history format puts it on every
    # line, but a hand-written history may leave it out.
    lines = with_messages(raw.select(
        F.coalesce(F.col("run"), _dir_name(F.col("file"))).alias("run"),
        F.coalesce(F.col("target"), F.lit(UNKNOWN_TARGET)).alias("target"),
        "node", "file", "index", "time", "process", "type", "f", "value", "error",
        _problem().alias("_problem"), _CORRUPT))
    # One pass over the JSON, cached: Spark refuses queries over raw JSON that touch only the
    # corrupt-record column, and every checker job after this one reads the same rows.
    lines = lines.cache()
    bad = lines.where(F.col("_problem").isNotNull()).select("file", "_problem", _CORRUPT)
    bad_rows = bad.limit(1).collect() if not skip_malformed else bad.collect()
    good = lines.where(F.col("_problem").isNull())
    ops = good.where(F.col("process") != HARNESS).select(*OP_COLUMNS)
    if not bad_rows:
        return Histories(ops, [], paths, harness_records(good))
    malformed = _locate(bad_rows, ops if skip_malformed else None)
    if not skip_malformed:
        lines.unpersist()
        first = malformed[0]
        raise MalformedHistory(f"{first.describe()}. Fix or delete the line, or analyse without it with "
                               "--skip-malformed (every verdict of that run is then 'unknown')")
    return Histories(ops, malformed, paths, harness_records(good))


def harness_records(lines: DataFrame) -> dict[tuple[str, str], dict]:
    """The run record of every run with harness records (a few lines per run: collected)."""
    from reports.run_record import harness_value, record_of

    rows = lines.where(F.col("process") == HARNESS).select("run", "target", "index", "f", "value").collect()
    events: dict[tuple[str, str], list[dict]] = {}
    for row in sorted(rows, key=lambda r: (r["run"], r["target"], r["index"])):
        events.setdefault((row["run"], row["target"]), []).append(
            {"process": HARNESS, "type": "info", "f": row["f"], "value": harness_value(row["value"])})
    return {key: record_of(evs, run=key[0], target=key[1]).as_pipeline_record() for key, evs in events.items()}


def _problem() -> Column:
    """Why a parsed line is not a valid operation (None when it is); mirrors chaos.history._check."""
    missing = [F.when(F.col(c).isNull(), F.lit(c)) for c in ("index", "time", "process", "type", "f")]
    return (F.when(F.col(_CORRUPT).isNotNull(), F.lit(_NOT_AN_OBJECT))
            .when(F.concat_ws(", ", *missing) != "", F.concat(F.lit("missing field(s) "), F.concat_ws(", ", *missing)))
            .when(~F.col("type").isin(*OP_TYPES),
                  F.concat(F.lit("type "), F.col("type"), F.lit(f" is not one of {', '.join(OP_TYPES)}")))
            .when(~(F.col("process").isin(NEMESIS, HARNESS) | F.col("process").rlike(r"^-?\d+$")),
                  F.concat(F.lit("process must be an integer, \"nemesis\" or \"harness\", not "), F.col("process"))))


def _dir_name(file_uri: Column) -> Column:
    return F.element_at(F.split(file_uri, "/"), -2)


def _uri_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def _locate(bad_rows, ops: DataFrame | None) -> list[Malformed]:
    """Line numbers of the malformed rows. Spark does not keep line numbers, so on this error path
    each affected file is scanned once in Python with the same rules as `_problem`."""
    counts: dict[str, int] = {}
    for row in bad_rows:
        path = _uri_path(row["file"])
        counts[path] = counts.get(path, 0) + 1
    runs = _runs_of_files(ops, list(counts)) if ops is not None else {}
    found: list[Malformed] = []
    for path, expected in counts.items():
        run = runs.get(path, Path(path).parent.name)
        in_file = []
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                reason = line_problem(text)
                if reason is not None:
                    in_file.append(Malformed(path, number, run, reason, text))
                    if ops is None or len(in_file) == expected:
                        break  # raising on the first one, or all found: no need to read on
        if not in_file:  # never lose the error: name the file even without a line number
            row = next(r for r in bad_rows if _uri_path(r["file"]) == path)
            in_file = [Malformed(path, 0, run, row["_problem"], row[_CORRUPT] or "")]
        found += in_file
    found.sort(key=lambda m: (m.file, m.line))
    return found


def line_problem(text: str) -> str | None:
    """Why one history line is malformed, or None: the Python twin of `_problem`, used to find
    line numbers (it follows Spark's JSON reader: a string field accepts a number's text)."""
    if not text.strip():
        return None  # blank lines are skipped by both readers
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        return _NOT_AN_OBJECT
    for name in ("index", "time"):
        value = event.get(name)
        # Spark's reader takes an integer beyond 64 bits as a type error too
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not _INT64_MIN <= value <= _INT64_MAX):
            return _NOT_AN_OBJECT
    missing = [k for k in ("index", "time", "process", "type", "f") if event.get(k) is None]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    kind, process = _as_text(event["type"]), _as_text(event["process"])
    if kind not in OP_TYPES:
        return f"type {kind} is not one of {', '.join(OP_TYPES)}"
    if not (process in (NEMESIS, HARNESS) or re.fullmatch(r"-?\d+", process)):
        return f'process must be an integer, "nemesis" or "harness", not {process}'
    return None


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _as_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _runs_of_files(ops: DataFrame, files: list[str]) -> dict[str, str]:
    uris = ops.select("file", "run").where(F.col("file").isin([Path(f).as_uri() for f in files] + files)).distinct().collect()
    return {_uri_path(r["file"]): r["run"] for r in uris}


# ---------------------------------------------------------------------- Parquet


def write_parquet(histories: Histories, out_dir: str | Path) -> Path:
    """Write the ops partitioned by run and target (and the skipped lines beside them), so later
    analyses skip JSON parsing; `load` reads the directory back."""
    out_dir = Path(out_dir)
    histories.ops.write.mode("overwrite").partitionBy("run", "target").parquet(str(out_dir))
    (out_dir / MALFORMED_FILE).write_text(json.dumps([asdict(m) for m in histories.malformed], indent=1))
    (out_dir / RECORDS_FILE).write_text(json.dumps([{"run": run, "target": target, "record": record}
                                                    for (run, target), record in sorted(histories.records.items())]))
    return out_dir


def load_parquet(spark: SparkSession, path: str | Path) -> Histories:
    path = Path(path)
    if (path / "_lean_flat").exists():  # reports/pipeline/fused/load.py LEAN_MARK
        raise HistoryNotFound(f"{path}: flat Parquet written by the fused engine; analyse it with --engine fused, "
                              "or analyse the history.jsonl files with --engine sql")
    ops = spark.read.parquet(str(path))
    if "msgs" not in ops.columns and "value" in ops.columns:
        ops = with_messages(ops)
    missing = [c for c in OP_COLUMNS if c not in ops.columns]
    if missing:
        raise HistoryNotFound(f"{path}: Parquet without the history columns {', '.join(missing)}; "
                              "write it with `brokerconf analyze --out DIR` (histories.parquet)")
    # Partition columns come back typed by inference (a run named 2024 would be an integer).
    ops = ops.select(*[F.col(c).cast("string").alias(c) if c in ("run", "target") else F.col(c) for c in OP_COLUMNS])
    sidecar = path / MALFORMED_FILE
    malformed = [Malformed(**m) for m in json.loads(sidecar.read_text())] if sidecar.exists() else []
    records_file = path / RECORDS_FILE
    records = ({(r["run"], r["target"]): r["record"] for r in json.loads(records_file.read_text())}
               if records_file.exists() else {})
    return Histories(ops, malformed, [str(path)], records)


# ---------------------------------------------------------------------- messages


def with_messages(ops: DataFrame) -> DataFrame:
    """``ops`` with ``msgs``: the messages its value carries (a message, a drain's list, or
    ``{"messages": [...]}``); null when the value is none of these. A message object without an
    ``id`` (a drain's ``{"subscriber": 0}`` request) is not a message; an id that is JSON null is
    kept as the string "None", as the pure-Python checkers' ``str(value["id"])`` does."""
    head = F.substring(F.ltrim(F.col("value")), 1, 1)
    columns = [c for c in ops.columns if c != "msgs"]
    # One parse per value, in its own projection (Spark keeps a projection with an expensive
    # expression apart instead of inlining it into every use). An array-of-messages schema reads
    # both shapes: Spark's JSON reader takes a lone object at the root as a one-element list. The
    # interpreted expressions (a second parse, the lambda that names null ids) run only on the
    # rare values that need them: measured at 1M operations, parsing every value as an object and
    # as a list and renaming ids in every row cost about five times the line parse itself.
    parsed = ops.select(*columns, F.from_json("value", T.ArrayType(MESSAGE_SCHEMA)).alias("_arr"))
    arr = F.col("_arr")
    null_id = F.col("value").rlike(r'"id"\s*:\s*null')
    wrapped = F.when(F.col("value").contains('"messages"'), F.from_json("value", _VALUE_OBJECT)["messages"])
    single = F.when(arr[0]["id"].isNotNull() | null_id, arr)
    as_list = F.coalesce(F.when(head == "[", arr), wrapped, single)
    named = F.when(null_id, F.transform(as_list, lambda m: m.withField("id", F.coalesce(m["id"], F.lit("None"))))) \
        .otherwise(as_list)
    return parsed.select(*columns, named.alias("msgs"))


def messages(ops: DataFrame) -> DataFrame:
    """One row per message an op carries (see `with_messages`): the op's run, target, node, index,
    time, process, type and f, then ``pos`` (place in a drain's list, 0 for a single message) and
    the message fields."""
    keys = ["run", "target", "node", "index", "time", "process", "type", "f"]
    exploded = ops.where(F.col("msgs").isNotNull()).select(*keys, F.posexplode("msgs").alias("pos", "m"))
    return exploded.select(*keys, "pos", *[F.col(f"m.{c}").alias(c) for c in MESSAGE_SCHEMA.fieldNames()])
