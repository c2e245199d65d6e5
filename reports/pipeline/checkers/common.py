"""What the Spark checkers share: the run context (ops, messages, fault windows), the result type,
the anomaly table, and the order-inversion job used by FIFO and group order.

A checker is a function ``check(ctx) -> CheckOutput``: one `CheckResult` per run (keyed by run
and target) plus a DataFrame of anomalies, one row per offending message with the indexes of the
operations that show it. Results are valid ``True``, ``False`` or ``"unknown"`` as in Jepsen.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reports.pipeline.load import NEMESIS, messages

UNKNOWN = "unknown"
RunKey = tuple[str, str]  # (run, target)

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
class CheckResult:
    checker: str
    run: str
    target: str
    valid: Any  # True | False | "unknown"
    reason: str = ""
    applicable: bool = True  # False: the run has nothing this checker can judge; left out of the merge
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class CheckOutput:
    results: list[CheckResult]
    anomalies: DataFrame  # ANOMALY_SCHEMA, for Parquet
    anomaly_rows: list[dict] = field(default_factory=list)  # the same, collected once, for JSON and counts
    tables: dict[str, DataFrame] = field(default_factory=dict)  # extra per-checker tables to write


@dataclass(frozen=True)
class FaultWindow:
    run: str
    target: str
    fault: str
    f: str
    start: int
    end: int
    open_at_end: bool = False  # never healed in the history: ends with the run
    #: when the step that injected the fault completed (its end event): from then on the fault is
    #: surely in place. None when the history does not say (a heal of a fault begun before it).
    in_place: int | None = None


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
        nemesis = (ops.where(F.col("process") == NEMESIS)
                   .select("run", "target", "index", "time", "f", "value").orderBy("run", "target", "index").collect())
        self.nemesis: dict[RunKey, list[dict]] = {}
        for row in nemesis:
            self.nemesis.setdefault((row["run"], row["target"]), []).append(row.asDict())
        self.windows: dict[RunKey, list[FaultWindow]] = {
            key: fault_windows(key, self.nemesis.get(key, []), self.spans[key][1]) for key in self.spans}

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

    @cached_property
    def completed(self) -> DataFrame:
        """Each completed client operation with its invoke: index, time, invoke_index, invoke_time, latency.

        A client process runs one operation at a time (chaos/history.py), so an op's invoke is the
        process's previous line."""
        w = Window.partitionBy("run", "target", "process").orderBy("index")
        ops = self.ops.where(F.col("process") != NEMESIS).select(
            "run", "target", "process", "index", "time", "type", "f",
            F.lag("type").over(w).alias("prev_type"), F.lag("f").over(w).alias("prev_f"),
            F.lag("index").over(w).alias("invoke_index"), F.lag("time").over(w).alias("invoke_time"))
        return (ops.where((F.col("type") != "invoke") & (F.col("prev_type") == "invoke") & (F.col("prev_f") == F.col("f")))
                .select("run", "target", "process", "f", "type", "index", "time", "invoke_index", "invoke_time",
                        (F.col("time") - F.col("invoke_time")).alias("latency")).cache())

    @cached_property
    def windows_df(self) -> DataFrame:
        """Per run: the sorted fault start times, and the merged fault intervals (starts, ends, and
        when each interval's first fault was in place)."""
        rows = []
        for (run, target), windows in self.windows.items():
            starts = sorted({w.start for w in windows})
            merged = disturbances(windows)
            rows.append((run, target, starts, [a for a, _, _ in merged], [b for _, b, _ in merged],
                         [c for _, _, c in merged]))
        schema = ("run string, target string, fault_starts array<bigint>, fault_from array<bigint>, "
                  "fault_to array<bigint>, fault_in_place array<bigint>")
        return self.spark.createDataFrame(rows, schema)

    def release(self) -> None:
        """Drop the cached tables (the session lives on for the next analysis)."""
        for name in ("completed",):
            if name in self.__dict__:
                self.__dict__.pop(name).unpersist()

    def empty_anomalies(self) -> DataFrame:
        return self.spark.createDataFrame([], ANOMALY_SCHEMA)


# ---------------------------------------------------------------------- fault windows


def fault_windows(key: RunKey, nemesis_rows: list[dict], run_end: int) -> list[FaultWindow]:
    """The faults of one run from its nemesis rows (``f``, ``time``, and ``value`` as JSON text):
    see `fault_windows_of_steps`."""
    steps = []
    for row in nemesis_rows:
        try:
            value = json.loads(row["value"]) if row["value"] else {}
        except ValueError:
            continue
        if isinstance(value, dict):
            steps.append({**value, "f": row["f"], "time": row["time"]})
    return fault_windows_of_steps(key, steps, run_end)


def fault_windows_of_steps(key: RunKey, steps: list[dict], run_end: int) -> list[FaultWindow]:
    """The faults of one run from its nemesis steps in history order (chaos/nemesis/base.py): a
    step's ``end`` event names the fault it started (``fault``, from ``started``; it is in place
    from the event's ``time``) and the windows of the faults it healed (``fault_window``). A fault
    never healed lasts until the run's last operation. Both engines read their faults here."""
    run, target = key
    open_faults: dict[str, tuple[str, int, int]] = {}
    windows: list[FaultWindow] = []
    for step in steps:
        if step.get("phase") != "end":
            continue
        for healed in step.get("fault_window") or []:
            opened = open_faults.pop(str(healed.get("fault")), None)
            windows.append(FaultWindow(run, target, str(healed.get("fault")), str(healed.get("f")),
                                       int(healed["start"]), int(healed["end"]),
                                       in_place=None if opened is None else opened[2]))
        if step.get("fault") is not None and step["f"] not in _NOT_FAULTS:
            started = step.get("started")
            open_faults[str(step["fault"])] = (step["f"], int(step["time"] if started is None else started),
                                               int(step["time"]))
    for fault, (f, start, in_place) in open_faults.items():
        windows.append(FaultWindow(run, target, fault, f, start, max(run_end, start), open_at_end=True,
                                   in_place=in_place))
    return sorted(windows, key=lambda w: (w.start, w.end))


def disturbances(windows: list[FaultWindow]) -> list[tuple[int, int, int]]:
    """The merged fault intervals (overlapping faults are one disturbance, from the first start) as
    (start, end, in place): when the fault that began it was surely in place (its start when the
    history does not say). Failover downtime counts recovery only from operations invoked after
    that (reports/checkers/failover_downtime.py says why: an operation invoked while the step was
    still injecting may have gone through before the fault took hold)."""
    out = []
    for start, end in merge_intervals([(w.start, w.end) for w in windows]):
        first = [w.start if w.in_place is None else w.in_place for w in windows if w.start == start]
        out.append((start, end, max(first)))
    return out


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def in_fault(time_col: Column) -> Column:
    """True when ``time_col`` falls in a merged fault interval (needs windows_df's columns)."""
    return F.exists(F.arrays_zip("fault_from", "fault_to"),
                    lambda w: (time_col >= w["fault_from"]) & (time_col < w["fault_to"]))


# ---------------------------------------------------------------------- order


def first_deliveries(deliveries: DataFrame) -> DataFrame:
    """Each message id's first delivery in a run (redeliveries and duplicates dropped: order is
    about when a message first reached a consumer; duplicates are total-queue's business)."""
    w = Window.partitionBy("run", "target", "id").orderBy("index", "pos")
    return deliveries.withColumn("_n", F.row_number().over(w)).where(F.col("_n") == 1).drop("_n")


def order_inversions(first: DataFrame, keys: list[str], checker: str, kind: str, label: Column) -> DataFrame:
    """Anomalies where a message arrived after one with a higher ``seq`` from the same producer,
    within each ``keys`` partition, in delivery order (op index, then place in a drain)."""
    w = (Window.partitionBy("run", "target", *keys, "producer").orderBy("index", "pos")
         .rowsBetween(Window.unboundedPreceding, -1))
    seen = F.max(F.struct("seq", "index", "id")).over(w)
    rows = first.where(F.col("producer").isNotNull() & F.col("seq").isNotNull()).withColumn("_before", seen)
    late = rows.where(F.col("_before").isNotNull() & (F.col("seq") < F.col("_before.seq")))
    return late.select(
        "run", "target", F.lit(checker).alias("checker"), F.lit(kind).alias("kind"), F.col("id").alias("message_id"),
        F.array(F.col("_before.index"), F.col("index")).alias("ops"),
        F.concat(label, F.lit(": seq "), F.col("seq").cast("string"), F.lit(" of producer "),
                 F.col("producer").cast("string"), F.lit(" arrived after seq "), F.col("_before.seq").cast("string"),
                 F.lit(" ("), F.col("_before.id"), F.lit(")")).alias("detail"))


def collect_anomalies(anomalies: DataFrame) -> list[dict]:
    """The anomaly rows, in a stable order. Every anomalous message id goes into verdicts.json, so
    they reach the driver anyway; collecting them once also gives the counts (one Spark job
    instead of two: on small histories a job's fixed cost is what the user waits for)."""
    return [r.asDict() for r in anomalies.orderBy("run", "target", "checker", "kind", "message_id").collect()]


def count_by_run(rows: list[dict]) -> dict[RunKey, dict[str, int]]:
    """{(run, target): {kind: count}} for collected anomaly rows."""
    out: dict[RunKey, dict[str, int]] = {}
    for r in rows:
        counts = out.setdefault((r["run"], r["target"]), {})
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    return out


def describe_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()) if n)
