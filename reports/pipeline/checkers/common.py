"""What the remaining Spark SQL checkers (topic fan-out, slow consumer) share: the run context,
the anomaly table's schema, and the run record beside a history. `CheckResult` and the verdict
words live in reports/checkers/result.py (re-exported here for reports/pipeline/verdicts.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reports.pipeline.load import NEMESIS, messages

from reports.checkers.result import UNKNOWN, CheckResult, RunKey, count_by_run, describe_counts  # noqa: F401 (re-exported)

ANOMALY_SCHEMA = T.StructType([
    T.StructField("run", T.StringType()),
    T.StructField("target", T.StringType()),
    T.StructField("checker", T.StringType()),
    T.StructField("kind", T.StringType()),
    T.StructField("message_id", T.StringType()),
    T.StructField("ops", T.ArrayType(T.LongType())),
    T.StructField("detail", T.StringType()),
])

#: nemesis steps that prepare or clean up rather than inject a fault
_NOT_FAULTS = ("setup", "teardown")

#: what `brokerconf chaos run` writes beside a run's history.jsonl (brokerconf/chaos_job.py)
RUN_RECORD = "verdict.json"


def read_run_record(history_file: str | None) -> dict:
    """The verdict.json beside a history file (a path or a file:// URI), or {} when there is none
    or it cannot be read: a history analysed on its own carries no record."""
    if not history_file:
        return {}
    parsed = urlparse(history_file)
    path = Path(unquote(parsed.path) if parsed.scheme == "file" else history_file).parent / RUN_RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    record["_path"] = str(path)
    return record


@dataclass
class CheckOutput:
    results: list[CheckResult]
    anomalies: DataFrame  # ANOMALY_SCHEMA, for Parquet
    anomaly_rows: list[dict] = field(default_factory=list)  # the same, collected once, for JSON and counts
    tables: dict[str, DataFrame] = field(default_factory=dict)  # extra per-checker tables to write


class Context:
    """The loaded ops of one or many runs, and what several checkers derive from them once."""

    def __init__(self, spark: SparkSession, ops: DataFrame) -> None:
        self.spark = spark
        self.ops = ops
        spans = ops.groupBy("run", "target").agg(
            F.min("time").alias("t0"), F.max("time").alias("t1"), F.count(F.lit(1)).alias("n"),
            F.max((F.col("f") == "drain") & (F.col("type") == "ok")).alias("drained"),
            F.max(F.coalesce(F.col("value").contains("topic://"), F.lit(False))).alias("topics")).collect()
        self.spans: dict[RunKey, tuple[int, int, int]] = {(r["run"], r["target"]): (r["t0"], r["t1"], r["n"])
                                                          for r in spans}
        #: runs whose history has a completed drain (total queue needs one)
        self.drained: set[RunKey] = {(r["run"], r["target"]) for r in spans if r["drained"]}
        #: runs that mention a topic at all: the only ones the topic checkers need to look at (a
        #: queue run would cost them their fixed dozen Spark jobs for nothing)
        self.topic_runs: set[RunKey] = {(r["run"], r["target"]) for r in spans if r["topics"]}

    @property
    def runs(self) -> list[RunKey]:
        return sorted(self.spans)

    @cached_property
    def records(self) -> dict[RunKey, dict]:
        """Each run's record (the verdict.json `brokerconf chaos run` wrote beside its history),
        {} for a run without one. A run read from Parquet finds it through the ``file`` column
        while the original run directory still exists."""
        rows = self.ops.select("run", "target", "file").distinct().collect()
        records: dict[RunKey, dict] = {}
        for row in rows:
            key = (row["run"], row["target"])
            if not records.get(key):
                records[key] = read_run_record(row["file"])
        return records

    def checker_option(self, key: RunKey, name: str, given: Any, default: Any) -> Any:
        """A checker setting for one run: the value given to the analysis (command line) wins,
        then the experiment's own setting from the run record, then the default."""
        if given is not None:
            return given
        value = (self.records.get(key, {}).get("checker_options") or {}).get(name)
        return default if value is None else value

    @cached_property
    def messages(self) -> DataFrame:
        """Message rows of client ops (nemesis values are not messages). Not cached: the values
        were parsed at load, and exploding them again is cheaper than holding a second copy."""
        return messages(self.ops.where(F.col("process") != NEMESIS))

    @cached_property
    def deliveries(self) -> DataFrame:
        """Messages a client got: ``receive`` and ``drain`` ops that completed ``ok``."""
        return self.messages.where(F.col("f").isin("receive", "drain") & (F.col("type") == "ok"))

    def empty_anomalies(self) -> DataFrame:
        return self.spark.createDataFrame([], ANOMALY_SCHEMA)


def collect_anomalies(anomalies: DataFrame) -> list[dict]:
    """The anomaly rows, in a stable order. Every anomalous message id goes into verdicts.json, so
    they reach the driver anyway; collecting them once also gives the counts (one Spark job
    instead of two: on small histories a job's fixed cost is what the user waits for)."""
    return [r.asDict() for r in anomalies.orderBy("run", "target", "checker", "kind", "message_id").collect()]
