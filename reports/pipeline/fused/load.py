"""Loading for the fused engine: one typed JSON scan, flattened to one row per message.

The SQL engine's loader (reports/pipeline/load.py) reads ``value`` as a string and parses it a
second time with ``from_json``; measured at 1M operations that second parse cost about five times
the line parse. Here the JSON reader types ``value`` as a struct directly (the message fields, a
``messages`` list, and the nemesis fields the checkers read), which costs almost nothing extra.
A value that does not fit that struct (a drain's list at the root, a field of another type) makes
Spark's PERMISSIVE reader keep the raw line in ``_corrupt_record``; only those rare rows are parsed
again, with the SQL loader's own rules (`load.with_messages`), so both engines see the same
messages and the same malformed lines.

The result (`FusedHistories.ops`) is flat: one row per message an op carries (``pos`` its place in
a drain's list, 0 for a single message), and one row with ``pos`` null for an op without messages.
Parquet is written back in that shape (no JSON text at all), partitioned by run and target.

One difference from the SQL loader: a lone message object whose ``id`` is JSON null is not a
message here (a typed read cannot tell a null id from a missing one), where the SQL loader keeps it
with the id "None". No workload writes such a value; inside a drain's list (parsed again) both
loaders keep it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reports.pipeline import load as sql_load
from reports.pipeline.load import (LINE_SCHEMA, MALFORMED_FILE, MESSAGE_SCHEMA, UNKNOWN_TARGET, Histories,
                                   HistoryNotFound, Malformed, MalformedHistory, find_sources)

_CORRUPT = "_corrupt_record"

FAULT_WINDOW = T.ArrayType(T.StructType([
    T.StructField("fault", T.StringType()), T.StructField("f", T.StringType()),
    T.StructField("start", T.LongType()), T.StructField("end", T.LongType()),
]))
#: what the checkers read from a value: a message, a wrapped list, or a nemesis step's details
VALUE_STRUCT = T.StructType([
    *MESSAGE_SCHEMA.fields,
    T.StructField("messages", T.ArrayType(MESSAGE_SCHEMA)),
    T.StructField("phase", T.StringType()),
    T.StructField("fault", T.StringType()),
    T.StructField("started", T.LongType()),
    T.StructField("fault_window", FAULT_WINDOW),
])
TYPED_LINE_SCHEMA = T.StructType([T.StructField("value", VALUE_STRUCT) if f.name == "value" else f
                                  for f in LINE_SCHEMA.fields])

OP_KEYS = ("run", "target", "node", "file", "index", "time", "process", "type", "f", "error")
NEMESIS_FIELDS = ("phase", "fault", "started", "fault_window")
#: columns of the flat table, in order
FLAT_COLUMNS = (*OP_KEYS, "pos", *MESSAGE_SCHEMA.fieldNames(), *NEMESIS_FIELDS)
#: marks Parquet written by this module (the SQL engine's has ``value`` and ``msgs`` instead)
LEAN_MARK = "_lean_flat"


@dataclass
class FusedHistories(Histories):
    """`Histories` whose ``ops`` is the flat table (FLAT_COLUMNS)."""
    lean: bool = True


def load(spark: SparkSession, path: str | Path, *, skip_malformed: bool = False) -> FusedHistories:
    kind, sources = find_sources(path)
    if kind == "parquet":
        return load_parquet(spark, sources[0])
    return load_jsonl(spark, sources, skip_malformed=skip_malformed)


def load_jsonl(spark: SparkSession, files: list[Path], *, skip_malformed: bool = False) -> FusedHistories:
    paths = [str(Path(f).resolve()) for f in files]
    raw = (spark.read.schema(TYPED_LINE_SCHEMA)
           .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT)
           .json(paths)
           .withColumn("file", F.input_file_name()))
    corrupt = F.col(_CORRUPT).isNotNull()
    # The rare rows whose value did not fit: the line again with the SQL loader's schema (value as
    # text, its own corrupt-record column for lines that are not JSON objects at all).
    again = F.when(corrupt, F.from_json(_CORRUPT, LINE_SCHEMA, {"columnNameOfCorruptRecord": _CORRUPT}))

    def field(name: str) -> Column:
        return F.when(corrupt, again[name]).otherwise(F.col(name))

    line = raw.select(*[field(c).alias(c) for c in ("index", "time", "process", "type", "f", "target", "node", "run",
                                                     "error")],
                      "file", again[_CORRUPT].alias(_CORRUPT),
                      F.col(_CORRUPT).alias("_line"), F.col("value").alias("_typed"),
                      F.when(corrupt, again["value"]).alias("_text"))
    line = line.select(
        F.coalesce(F.col("run"), F.element_at(F.split(F.col("file"), "/"), -2)).alias("run"),
        F.coalesce(F.col("target"), F.lit(UNKNOWN_TARGET)).alias("target"),
        *[c for c in OP_KEYS if c not in ("run", "target")],
        # `load._problem` reads `_corrupt_record`: here the re-parse's, set only for a line
        # that is not a JSON object with the history's field types
        sql_load._problem().alias("_problem"), "_line", "_typed", "_text")
    # Messages: typed rows directly; re-parsed rows by the SQL loader's rules (`with_messages`
    # reads the ``value`` column, so it is given the text under that name).
    typed = F.col("_typed")
    single = F.when(typed["id"].isNotNull(), F.array(F.struct(*[typed[c].alias(c) for c in MESSAGE_SCHEMA.fieldNames()])))
    msgs_typed = F.coalesce(typed["messages"], single)
    line = line.withColumn("_text_parsed", F.col("_line").isNotNull())
    reparsed = sql_load.with_messages(line.withColumnRenamed("_text", "value")).withColumnRenamed("value", "_text")
    text_value = F.from_json(F.col("_text"), VALUE_STRUCT)
    nemesis = [F.when(F.col("_text_parsed"), text_value[c]).otherwise(typed[c]).alias(c) for c in NEMESIS_FIELDS]
    # The raw line is kept only where it is needed (to name a malformed line): a drain's line
    # holds every message it took, and would be copied to each of their rows by the explode.
    prepared = reparsed.select(*OP_KEYS, "_problem", F.when(F.col("_problem").isNotNull(), F.col("_line")).alias("_line"),
                               F.when(F.col("_text_parsed"), F.col("msgs")).otherwise(msgs_typed).alias("msgs"),
                               *nemesis)
    flat = prepared.select(*OP_KEYS, "_problem", "_line", F.posexplode_outer("msgs").alias("pos", "m"), *NEMESIS_FIELDS)
    flat = flat.select(*OP_KEYS, "_problem", "_line", "pos", *[F.col(f"m.{c}").alias(c) for c in MESSAGE_SCHEMA.fieldNames()],
                       *NEMESIS_FIELDS).cache()
    bad = flat.where(F.col("_problem").isNotNull() & ((F.col("pos") == 0) | F.col("pos").isNull()))
    bad = bad.select("file", "_problem", F.col("_line").alias(_CORRUPT))
    bad_rows = bad.limit(1).collect() if not skip_malformed else bad.collect()
    ops = flat.where(F.col("_problem").isNull()).select(*FLAT_COLUMNS)
    if not bad_rows:
        return FusedHistories(ops, [], paths)
    # pylint: disable=protected-access - the same line-number search as the SQL loader
    malformed = sql_load._locate(bad_rows, ops.select("file", "run") if skip_malformed else None)
    if not skip_malformed:
        flat.unpersist()
        first = malformed[0]
        raise MalformedHistory(f"{first.describe()}. Fix or delete the line, or analyse without it with "
                               "--skip-malformed (every verdict of that run is then 'unknown')")
    return FusedHistories(ops, malformed, paths)


# ---------------------------------------------------------------------- Parquet


def write_parquet(histories: FusedHistories, out_dir: str | Path) -> Path:
    """The flat table partitioned by run and target, the skipped lines and a marker beside it."""
    out_dir = Path(out_dir)
    histories.ops.write.mode("overwrite").partitionBy("run", "target").parquet(str(out_dir))
    (out_dir / MALFORMED_FILE).write_text(json.dumps([asdict(m) for m in histories.malformed], indent=1))
    (out_dir / LEAN_MARK).write_text("flat: one row per message (reports/pipeline/fused/load.py)\n")
    return out_dir


def load_parquet(spark: SparkSession, path: str | Path) -> FusedHistories:
    """Parquet written by either engine: the flat table as is, the SQL engine's (``msgs``) by
    exploding its message lists (its nemesis values are parsed once, they are few)."""
    path = Path(path)
    data = spark.read.parquet(str(path))
    sidecar = path / MALFORMED_FILE
    malformed = [Malformed(**m) for m in json.loads(sidecar.read_text())] if sidecar.exists() else []
    if "pos" in data.columns:
        missing = [c for c in FLAT_COLUMNS if c not in data.columns]
        if missing:
            raise HistoryNotFound(f"{path}: flat Parquet without the columns {', '.join(missing)}; write it again "
                                  "with `brokerconf analyze --out DIR` (histories.parquet)")
        flat = data
    else:
        flat = from_sql_ops(sql_load.load_parquet(spark, path).ops)
    flat = flat.select(*[F.col(c).cast("string").alias(c) if c in ("run", "target") else F.col(c) for c in FLAT_COLUMNS])
    return FusedHistories(flat, malformed, [str(path)])


def from_sql_ops(ops: DataFrame) -> DataFrame:
    """The SQL engine's ops (``value`` text, ``msgs``) as the flat table."""
    text_value = F.when(F.substring(F.ltrim(F.col("value")), 1, 1) == "{", F.from_json("value", VALUE_STRUCT))
    flat = ops.select(*OP_KEYS, F.posexplode_outer("msgs").alias("pos", "m"),
                      *[text_value[c].alias(c) for c in NEMESIS_FIELDS])
    return flat.select(*OP_KEYS, "pos", *[F.col(f"m.{c}").alias(c) for c in MESSAGE_SCHEMA.fieldNames()], *NEMESIS_FIELDS)
